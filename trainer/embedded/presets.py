"""Build a run's task, policy and sampler from its config (presets or a local model)."""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from common.refs import load
from trainer.spec.config import ConfigError, RunConfig
from trainer.embedded.model import count_parameters, load_policy
from trainer.spec.operator_policy import RunPolicy
from trainer.rollout.attention import use_packed_gqa
from trainer.spec.sampler_registry import get_sampler
from trainer.models.catalog import installed, model_dir, not_installed_message
from trainer.tasks.registry import SHIPPED_PRESETS, get_task_spec

ASSETS = Path(__file__).parents[1] / "assets"  # trainer/assets (package data)
# One directory per shipped preset (trainer/tasks/registry.py names them); `aero pretrain` writes
# them, and they are shipped in the repo. An installed model's directory is found by preset_dir.
PRESETS = {name: ASSETS / name for name in SHIPPED_PRESETS}


def preset_dir(name: str) -> Path:
    """A preset's model directory: shipped in trainer/assets/, or an installed model's under the
    models directory (trainer/models/catalog.py). A model not installed on this host is a
    ConfigError naming ``preset`` and the command that installs it."""
    if name in PRESETS:
        return PRESETS[name]
    if installed(name) is None:
        raise ConfigError([("preset", not_installed_message(name))])
    return model_dir(name)


@dataclass
class Setup:
    """Everything built from a config before any compute: task, policy, sampler (what generates
    the rollouts: trainer/rollout/).

    ``compute_dtype`` is the dtype of the forward passes; ``autocast()`` is the context the
    update runs in (bf16 autocast over float32 master weights on CUDA, else a no-op). The
    hf sampler autocasts its own forwards with the same dtype."""

    task: Any
    model: torch.nn.Module
    sampler: Any
    device: torch.device
    n_params: int
    n_layers: int
    d_model: int
    compute_dtype: torch.dtype = torch.float32
    memory_plan: Any = None  # trainer.embedded.memory_plan.MemoryPlan, set when the run's state is built

    def autocast(self):
        if self.device.type == "cuda" and self.compute_dtype in (torch.bfloat16, torch.float16):
            return torch.autocast("cuda", dtype=self.compute_dtype)
        return contextlib.nullcontext()


def resolve_device(cfg: RunConfig) -> tuple[torch.device, torch.dtype]:
    """(device, compute dtype): bf16 for dtype=bfloat16, or auto on CUDA; float32 otherwise."""
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError([("device", "cuda requested but no CUDA device is visible; use device=auto or cpu")])
    dev = torch.device("cuda" if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()) else "cpu")
    if cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and dev.type == "cuda"):
        return dev, torch.bfloat16
    return dev, torch.float32


def weight_dtype(device: torch.device, compute_dtype: torch.dtype) -> torch.dtype:
    """Storage dtype of the trained weights. On CUDA always float32 (master weights; bf16 runs
    as autocast): AdamW steps of lr 5e-6 are far below bf16's resolution (2^-8 relative) and
    would round to no change. On CPU the engine cannot autocast, so bf16 means bf16 weights."""
    return torch.float32 if device.type == "cuda" else compute_dtype


def load_setup(cfg: RunConfig, policy: RunPolicy | None = None) -> Setup:
    """Model, task and sampler for ``cfg``; the code sandbox's isolation, interpreter and uid come
    from the operator's ``policy`` (default: :class:`RunPolicy`'s defaults)."""
    device, dtype = resolve_device(cfg)
    model, path = load_model(cfg, device, dtype)
    if device.type == "cuda":  # decode reads the KV cache once per step (trainer/rollout/attention.py);
        use_packed_gqa(model)  # CPU runs keep transformers' own path, bit for bit as before
    task = build_task(cfg, path, policy)
    sampler = build_sampler(cfg, model, path, task, device, dtype)
    mc = model.config
    return Setup(task=task, model=model, sampler=sampler, device=device, n_params=count_parameters(model),
                 n_layers=mc.num_hidden_layers, d_model=mc.hidden_size, compute_dtype=dtype)


def load_model(cfg: RunConfig, device: torch.device, dtype: torch.dtype) -> tuple[torch.nn.Module, Path]:
    """The run's policy on ``device`` and the directory it comes from: the preset's checkpoint,
    the local model_path, or a model_shape's config with random weights (seeded by the run,
    built on the device: trainer/embedded/shapes.py)."""
    if cfg.model_shape:
        from trainer.embedded.shapes import SHAPES, build_shape_model

        return build_shape_model(cfg.model_shape, device, weight_dtype(device, dtype), seed=cfg.seed,
                                 gradient_checkpointing=cfg.gradient_checkpointing), SHAPES[cfg.model_shape]
    path = preset_dir(cfg.preset) if cfg.preset else Path(cfg.model_path).expanduser()
    if cfg.preset and not (path / "config.json").is_file():
        raise ConfigError([("preset", f"preset '{cfg.preset}' has no checkpoint at {path}; run `aero pretrain`")])
    try:
        return load_policy(path, device=device, dtype=weight_dtype(device, dtype),
                           gradient_checkpointing=cfg.gradient_checkpointing), path
    except FileNotFoundError as e:
        raise ConfigError([("model_path", str(e))]) from None


def sampler_name(cfg: RunConfig, device: torch.device) -> tuple[str, str | None]:
    """(sampler to build, why the requested one was replaced or None). A sampler that cannot sample
    on ``device`` on this host (its spec's ``unavailable``: 'vllm' without vLLM installed, or without
    CUDA unless the installed vLLM is a CPU build) falls back to its spec's ``fallback``, with a
    message that says so."""
    spec = get_sampler(cfg.rollout.sampler)
    why = load(spec.unavailable)(device) if spec.unavailable is not None else None
    if why is None or spec.fallback is None:
        return cfg.rollout.sampler, None
    return spec.fallback, f"{why}; falling back to the {spec.fallback} sampler"


def stop_token_ids(task, model) -> list[int]:
    """Every id that ends a response: the tokenizer's EOS, the generation config's EOS ids, and
    the task's own stop ids where it declares some (the strata task's, trainer/tasks/scripted.py)."""
    ids = {int(task.tokenizer.eos_id), *(int(i) for i in getattr(task, "stop_ids", ()))}
    extra = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(int(i) for i in (extra if isinstance(extra, (list, tuple)) else [extra]) if i is not None)
    return sorted(ids)


def build_sampler(cfg: RunConfig, model: torch.nn.Module, path: Path, task, device: torch.device, dtype: torch.dtype):
    from trainer.rollout import make_sampler

    name, why = sampler_name(cfg, device)
    if why is not None:
        warnings.warn(why, RuntimeWarning, stacklevel=2)
    return make_sampler(name, model=model, model_path=path, stop_ids=stop_token_ids(task, model),
                        pad_id=task.tokenizer.pad_id, device=device, dtype=dtype, seed=cfg.seed,
                        max_model_len=cfg.max_prompt_tokens + cfg.max_new_tokens, decode=cfg.rollout.decode)


def build_task(cfg: RunConfig, model_dir: Path, policy: RunPolicy | None = None):
    """The run's task, with the tokenizer that ships in the model directory (the strata task
    needs none: its ids render as numbers).

    Math and code: training problems longer than ``max_prompt_tokens`` are dropped at load (as
    verl's filter_overlong_prompts); benchmarks come from ``cfg.benchmarks``; code runs in the
    sandbox with ``cfg.code``'s limits. A missing data file or a
    model directory without a usable tokenizer is a ConfigError naming the field."""
    from trainer.tasks import make_task

    source = get_task_spec(cfg.task).source
    if source == "scripted":  # synthetic prompts and scripted rewards over the shape's vocabulary
        from trainer.embedded.shapes import shape_config

        return make_task(cfg.task, vocab_size=shape_config(cfg.model_shape).vocab_size,
                         max_prompt_tokens=cfg.max_prompt_tokens)
    if source == "generated":
        return build_generated_task(cfg, model_dir)
    for name, bench in cfg.benchmarks.items():
        if not Path(bench).expanduser().is_file():
            raise ConfigError([("benchmarks", f"benchmark {name!r}: {bench} is not a local file")])
    if not Path(cfg.train_data).expanduser().is_file():
        raise ConfigError([("train_data", f"{cfg.train_data} is not a local file (nothing is downloaded)")])
    tokenizer = load_model_tokenizer(model_dir)
    common = dict(tokenizer=tokenizer, benchmark_paths={k: Path(v).expanduser() for k, v in cfg.benchmarks.items()},
                  max_prompt_tokens=cfg.max_prompt_tokens)
    try:
        spec = get_task_spec(cfg.task)
        if spec.build is not None:  # a task with its own construction (code: the sandbox)
            return load(spec.build)(cfg, common, policy)
        return make_task(cfg.task, train_path=Path(cfg.train_data).expanduser(), **common)
    except ValueError as e:  # a bad row (file + line + field), or every prompt over max_prompt_tokens
        raise ConfigError([("train_data", str(e))]) from None


def build_generated_task(cfg: RunConfig, model_dir: Path):
    """A generated task (arithmetic, countdown) in the model's own language: the char tokenizer
    saved beside a tiny checkpoint (``char_tokenizer.json``; prompts such as ``37+85=``), or a real
    model's Hugging Face tokenizer and chat template (questions in words, free-text answers:
    trainer/tasks/chat_format.py). A directory with neither is a ConfigError naming both files."""
    from trainer.tasks import make_task
    from trainer.tasks.tokenizer import FILENAME, CharTokenizer

    field = "model_path" if cfg.model_path else "preset"
    kw = dict(benchmark_size=cfg.eval_problems, train_size=cfg.train_size)
    if not (model_dir / FILENAME).is_file():
        if not any((model_dir / f).is_file() for f in TOKENIZER_FILES):
            raise ConfigError([(field, f"{model_dir} has no {FILENAME} (a char-level preset's tokenizer) and no Hugging "
                                f"Face tokenizer ({', '.join(TOKENIZER_FILES)}): the {cfg.task} task needs one of them")])
        from trainer.tasks.chat_format import ChatFormat

        task = make_task(cfg.task, chat=ChatFormat(load_model_tokenizer(model_dir, field)), **kw)
        # Questions in words are longer than the char prompts: a cap below them would cut prompts.
        longest = max(len(task.encode_prompt(p)) for ps in task.benchmarks().values() for p in ps)
        if longest > cfg.max_prompt_tokens:
            raise ConfigError([("max_prompt_tokens", f"the {cfg.task} task's questions, in this model's chat template, "
                                f"take up to {longest} tokens: set max_prompt_tokens to at least {longest}")])
        return task
    tokenizer = CharTokenizer.load(model_dir)
    task = make_task(cfg.task, tokenizer=tokenizer, **kw)
    if missing := sorted(set(task.CHARS) - set(tokenizer.chars)):
        raise ConfigError([(field, f"{model_dir} was trained for another task: its tokenizer has no {missing!r} "
                            f"(the {cfg.task} task needs them)")])
    return task


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")


def load_model_tokenizer(model_dir: Path, field: str = "model_path"):
    """The HF tokenizer shipped in ``model_dir``, or a ConfigError. transformers 5 builds an
    EMPTY tokenizer (one token) from a directory holding only config.json instead of failing,
    so the vocabulary files are checked first, and the result must have an EOS token."""
    from trainer.tasks.math import load_hf_tokenizer

    if not any((model_dir / f).is_file() for f in TOKENIZER_FILES):
        raise ConfigError([(field, f"{model_dir} has no tokenizer files (one of {', '.join(TOKENIZER_FILES)})")])
    try:
        tokenizer = load_hf_tokenizer(model_dir)
    except Exception as e:  # noqa: BLE001  (OSError, ValueError, sentencepiece/tiktoken import errors...)
        raise ConfigError([(field, f"{model_dir}: the tokenizer could not be loaded ({type(e).__name__}: {e})")]) from None
    if tokenizer.eos_token_id is None:
        raise ConfigError([(field, f"{model_dir}: the tokenizer has no EOS token (set eos_token in tokenizer_config.json)")])
    return tokenizer
