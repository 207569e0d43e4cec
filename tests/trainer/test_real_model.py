"""The real-model path end to end: a local Hugging Face directory (a tiny Qwen2 with a real BPE
tokenizer and a chat template, built here), a math JSONL training set and local benchmark
files, loaded by path through run_training. Nothing is downloaded."""

import json

import pytest
import torch

from trainer.spec.config import ConfigError, for_method, parse_run_config
from trainer.platform.run import run_training
from trainer.platform.sinks import MemorySink
from trainer.embedded.model import is_gradient_checkpointing
from trainer.embedded.presets import load_setup, weight_dtype
from trainer.tasks.math import PAPER_MATH_SYSTEM_PROMPT

PROBLEMS = [("What is 2+3?", "5"), ("Compute 7*6.", "42"), ("What is 10-4?", "6"), ("Simplify 1/2+1/2.", "1")]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_hf_model):
    # tests/trainer/conftest.py: a tiny Qwen2 + a BPE tokenizer trained on the paper prompt and some math text
    corpus = [PAPER_MATH_SYSTEM_PROMPT, "system user assistant \\boxed{5} \\frac{1}{2}"] + [q for q, _ in PROBLEMS]
    return tiny_hf_model(tmp_path_factory.mktemp("tiny-qwen2"), corpus)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("math-data")
    train = d / "train.jsonl"
    # verl layout: chat prompt + reward_model.ground_truth
    train.write_text("".join(json.dumps({"data_source": "toy", "prompt": [{"role": "user", "content": q}],
                                         "reward_model": {"style": "rule", "ground_truth": a}}) + "\n"
                             for q, a in PROBLEMS))
    aime = d / "aime24.jsonl"  # AIME24 layout: Problem / Answer
    aime.write_text("".join(json.dumps({"Problem": q, "Answer": a}) + "\n" for q, a in PROBLEMS[:2]))
    olymp = d / "olympiad.jsonl"  # OlympiadBench layout: question / final_answer (a list)
    olymp.write_text("".join(json.dumps({"question": q, "final_answer": [a]}) + "\n" for q, a in PROBLEMS[2:]))
    return {"train": train, "AIME24": aime, "OlympiadBench": olymp}


def run_cfg(model_dir, data, **kw):
    cfg = {"preset": None, "model_path": str(model_dir), "task": "math", "train_data": str(data["train"]),
            "benchmarks": {"AIME24": str(data["AIME24"]), "OlympiadBench": str(data["OlympiadBench"])},
            "steps": 2, "batch_prompts": 2, "n_total": 4, "max_new_tokens": 6, "max_prompt_tokens": 400,
            "eval_every": 0, "eval_n": 2, "checkpoint_every": 0, "device": "cpu", "optim": {"lr": 1e-3},
            "aero": {"n_explore": 2, "n_max": 6}, "dapo": {"overlong_buffer": 2}, **kw}
    return for_method(cfg, cfg.get("method", "aero"))  # each method keeps the sections it reads


def test_setup_uses_the_directory_tokenizer_template_and_system_prompt(model_dir, data):
    setup = load_setup(parse_run_config(run_cfg(model_dir, data)))
    task = setup.task
    p = task.train_problems(0, 1, seed=0)[0]
    assert p.prompt.startswith("<|im_start|>system\n" + PAPER_MATH_SYSTEM_PROMPT + "<|im_end|>\n<|im_start|>user\n")
    assert p.prompt.endswith("<|im_start|>assistant\n")
    ids = task.encode_prompt(p)
    assert task.tokenizer.hf.decode(ids) == p.prompt  # byte-level BPE round-trips the template exactly
    assert setup.sampler.eos_id == task.tokenizer.hf.convert_tokens_to_ids("<|im_end|>")
    assert list(task.benchmarks()) == ["AIME24", "OlympiadBench"]
    assert [b.answer for b in task.benchmarks()["OlympiadBench"]] == ["6", "1"]
    assert setup.n_params == sum(t.numel() for t in setup.model.parameters())


@pytest.mark.parametrize("method", ["grpo", "aero"])
def test_trains_two_steps_by_path_and_reports_each_benchmark(method, model_dir, data, tmp_path):
    from trainer.embedded.checkpoint import load_latest_checkpoint
    from transformers import AutoModelForCausalLM

    sink = MemorySink()
    cfg = parse_run_config(run_cfg(model_dir, data, method=method, gradient_checkpointing=True))
    summary = run_training(cfg, tmp_path, sink)
    assert summary["status"] == "completed" and sorted(sink.steps) == [1, 2]
    for m in sink.steps.values():
        assert m["rollout/generated"] <= 2 * 4  # the equal budget n_total * P
        assert m["tokens/generated"] > 0 and m["flops/total"] > 0
    before = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).state_dict()
    after = load_latest_checkpoint(tmp_path)["model"]
    assert max((after[k] - before[k]).abs().max().item() for k in before) > 1e-6, "parameters did not change"
    final = sink.evals[2]
    assert set(final) == {"AIME24", "OlympiadBench", "overall"}
    assert final["AIME24"]["per_problem"] == [[2, c] for _, c in final["AIME24"]["per_problem"]]
    assert len(final["OlympiadBench"]["per_problem"]) == 2


def test_gradient_checkpointing_flag_reaches_the_model(model_dir, data):
    on = load_setup(parse_run_config(run_cfg(model_dir, data, gradient_checkpointing=True))).model
    off = load_setup(parse_run_config(run_cfg(model_dir, data))).model
    assert is_gradient_checkpointing(on) and not is_gradient_checkpointing(off)


def test_bf16_keeps_fp32_master_weights_on_cuda_only():
    assert weight_dtype(torch.device("cuda"), torch.bfloat16) == torch.float32
    assert weight_dtype(torch.device("cpu"), torch.bfloat16) == torch.bfloat16
    assert weight_dtype(torch.device("cpu"), torch.float32) == torch.float32


def _issue(cfg):
    with pytest.raises(ConfigError) as err:
        load_setup(parse_run_config(cfg))
    return dict(err.value.issues)


def test_missing_or_unreadable_model_dir_is_a_clear_error(model_dir, data, tmp_path):
    missing = _issue(run_cfg(tmp_path / "nope", data))
    assert "not a local directory" in missing["model_path"] and "nothing is downloaded" in missing["model_path"]
    hub_id = _issue(run_cfg("Qwen/Qwen2.5-Math-1.5B", data))  # a hub id is never fetched
    assert "nothing is downloaded" in hub_id["model_path"]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((model_dir / "config.json").read_text())
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    assert "could not be loaded" in _issue(run_cfg(broken, data))["model_path"]
    no_tok = tmp_path / "no_tokenizer"
    no_tok.mkdir()
    for f in ("config.json", "model.safetensors"):
        (no_tok / f).write_bytes((model_dir / f).read_bytes())
    assert "tokenizer" in _issue(run_cfg(no_tok, data))["model_path"]


def test_bad_data_paths_name_the_field(model_dir, data, tmp_path):
    assert "train_data" in _issue(run_cfg(model_dir, data, train_data=str(tmp_path / "none.jsonl")))
    assert "benchmarks" in _issue(run_cfg(model_dir, data, benchmarks={"MATH-500": str(tmp_path / "none.jsonl")}))
    assert "train_data" in _issue(run_cfg(model_dir, data, max_prompt_tokens=5))  # every prompt is too long
    with pytest.raises(ConfigError) as err:
        parse_run_config({"benchmarks": {"AIME24": "/x.jsonl"}})  # arithmetic task: benchmarks are built in
    assert "benchmarks" in dict(err.value.issues)
