"""The local Hugging Face model directory a verl run trains: ``model_path`` as given, an installed
real model's directory (``smollm2-135m``), or the tiny preset exported as one (weights, config
and an HF tokenizer over the same 19-token vocabulary).

verl builds its tokenizer with ``AutoTokenizer`` and renders prompts with the tokenizer's chat
template, so the tiny preset (a character tokenizer of our own, trainer/tasks/tokenizer.py) gets
an equivalent fast tokenizer: a word-level model over the same ids, one token per character,
and a chat template that renders a conversation as BOS + the message text, which is exactly the
arithmetic task's prompt encoding (``ArithmeticTask.encode_prompt``). The export is written once
into OUT/verl_model and checked against the character tokenizer before use.
"""

from __future__ import annotations

import shutil
from pathlib import Path

CHAT_TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
MODEL_FILES = ("config.json", "model.safetensors", "generation_config.json")


def hf_char_tokenizer(chars: str):
    """A PreTrainedTokenizerFast with the character tokenizer's ids (module docstring)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from trainer.tasks.tokenizer import SPECIALS

    vocab = {s: i for i, s in enumerate(SPECIALS)} | {c: i + len(SPECIALS) for i, c in enumerate(chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=SPECIALS[1], eos_token=SPECIALS[2],
                                 pad_token=SPECIALS[0])
    hf.chat_template = CHAT_TEMPLATE
    return hf


def export_preset(preset_dir: Path, out: Path) -> Path:
    """Write ``preset_dir``'s weights and an HF tokenizer to ``out``; returns ``out``."""
    from trainer.tasks.tokenizer import CharTokenizer

    char = CharTokenizer.load(preset_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        if (preset_dir / name).is_file():
            shutil.copyfile(preset_dir / name, out / name)
    hf = hf_char_tokenizer(char.chars)
    hf.save_pretrained(out)
    probe = char.chars
    ids = hf.apply_chat_template([{"role": "user", "content": probe}], add_generation_prompt=True, tokenize=False)
    if hf(ids, add_special_tokens=False)["input_ids"] != [char.bos_id, *char.encode(probe)]:
        raise RuntimeError("the exported tokenizer does not encode as the character tokenizer")
    agent_loops(out)
    return out


AGENT_LOOPS_FILE = "agent_loops.yaml"
EXPORT_DIR = "verl_model"  # under the run directory: the tiny preset's export, every preset's agent-loop file


def agent_loops(out: Path) -> Path:
    """The agent-loop file verl reads (``rollout.agent.agent_loop_config_path``): the
    single-turn loop without a model-type hint (trainer/verl/plugins/agent_loop.py), for every
    preset."""
    from trainer.verl.plugins import CHAR_AGENT_LOOP, CHAR_AGENT_LOOP_TARGET

    path = out / AGENT_LOOPS_FILE
    path.write_text(f"- name: {CHAR_AGENT_LOOP}\n  _target_: {CHAR_AGENT_LOOP_TARGET}\n")
    return path


def model_dir(cfg, out_dir: str | Path) -> Path:
    """The model directory verl trains for ``cfg`` (module docstring): an installed real model's
    directory is already a Hugging Face one (trainer/models/install.py) and is read in place."""
    if cfg.preset is None:
        return Path(cfg.model_path).expanduser()
    from trainer.embedded.presets import PRESETS, preset_dir

    out = Path(out_dir) / EXPORT_DIR
    if cfg.preset not in PRESETS:  # the agent-loop file goes beside the run, never into the install
        out.mkdir(parents=True, exist_ok=True)
        agent_loops(out)
        return preset_dir(cfg.preset)
    return export_preset(PRESETS[cfg.preset], out)


def stop_ids(model_path: str | Path, tokenizer) -> list[int]:
    """Every id that ends a response: the tokenizer's EOS and the generation config's EOS ids
    (as the embedded engine stops; the rollout server and the step accounting use these)."""
    from transformers import GenerationConfig

    ids = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
    try:
        extra = GenerationConfig.from_pretrained(str(model_path), local_files_only=True).eos_token_id
    except OSError:  # no generation_config.json
        extra = None
    ids.update(int(i) for i in (extra if isinstance(extra, (list, tuple)) else [extra]) if i is not None)
    return sorted(ids)
