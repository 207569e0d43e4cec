"""The code task end to end: a tiny local Qwen2 (tests/trainer/conftest.py), warm-started for a
few seconds to answer with a fenced Python block, trains GRPO and AERO steps on a code set
written here, with rewards from the real sandbox, then evaluates per code benchmark."""

import json

import pytest
import torch

from trainer.spec.config import for_method, parse_run_config
from trainer.platform.run import run_training
from trainer.platform.sinks import MemorySink
from trainer.tasks.code import PAPER_CODE_SYSTEM_PROMPT, CodeTask

# The warm start teaches ANSWER for every question; it solves "Double" and fails "Triple",
# so groups have mixed rewards (and sampling at T=1 adds wrong and code-less responses).
ANSWER = "```python\nprint(int(input())*2)\n```"
DOUBLE = {"question": "Double the number.", "input_output": json.dumps({"inputs": ["2\n", "5\n"], "outputs": ["4\n", "10\n"]})}
TRIPLE = {"question": "Triple the number.", "input_output": json.dumps({"inputs": ["2\n"], "outputs": ["6\n"]})}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("code-data")
    train = d / "train.jsonl"
    train.write_text(json.dumps(DOUBLE) + "\n" + json.dumps(TRIPLE) + "\n")
    apps = d / "apps.jsonl"  # APPS layout
    apps.write_text(json.dumps(DOUBLE) + "\n")
    cc = d / "codecontests.jsonl"  # CodeContests layout
    cc.write_text(json.dumps({"description": "Triple the number.", "public_tests": {"input": ["3\n"], "output": ["9\n"]},
                              "private_tests": {"input": ["1\n"], "output": ["3\n"]}}) + "\n")
    return {"train": train, "APPS": apps, "CodeContests": cc}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_hf_model, data):
    from transformers import AutoModelForCausalLM

    corpus = [PAPER_CODE_SYSTEM_PROMPT, ANSWER, DOUBLE["question"], TRIPLE["question"]]
    d = tiny_hf_model(tmp_path_factory.mktemp("tiny-qwen2-code"), corpus)
    task = CodeTask(data["train"], tokenizer=d)
    model = AutoModelForCausalLM.from_pretrained(d, local_files_only=True)
    answer = task.tokenizer.encode(ANSWER) + [task.tokenizer.eos_id]
    seqs = [task.encode_prompt(p) + answer for p in task.problems]
    n = max(map(len, seqs))
    ids = torch.tensor([s + [task.tokenizer.pad_id] * (n - len(s)) for s in seqs])
    labels = torch.tensor([[-100] * (len(s) - len(answer)) + answer + [-100] * (n - len(s)) for s in seqs])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    torch.manual_seed(0)
    for _ in range(120):  # ~2 s: enough for the answer to be the likely sample
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.5
    model.save_pretrained(d)
    return d


def run_cfg(model_dir, data, **kw):
    cfg = {"preset": None, "model_path": str(model_dir), "task": "code", "train_data": str(data["train"]),
            "benchmarks": {"APPS": str(data["APPS"]), "CodeContests": str(data["CodeContests"])},
            "steps": 2, "batch_prompts": 2, "n_total": 4, "max_new_tokens": 24, "max_prompt_tokens": 400,
            "temperature": 1.0, "eval_every": 0, "eval_n": 2, "checkpoint_every": 0, "device": "cpu",
            "optim": {"lr": 1e-3}, "aero": {"n_explore": 2, "n_max": 6},
            "code": {"test_timeout_s": 2.0, "timeout_s": 10.0, "workers": 4}, **kw}
    return for_method(cfg, cfg.get("method", "aero"))  # each method keeps the sections it reads


@pytest.mark.parametrize("method", ["grpo", "aero"])
def test_code_run_trains_with_sandbox_rewards_and_reports_each_benchmark(method, model_dir, data, tmp_path):
    from transformers import AutoModelForCausalLM

    from trainer.embedded.checkpoint import load_latest_checkpoint

    sink = MemorySink()
    summary = run_training(parse_run_config(run_cfg(model_dir, data, method=method)), tmp_path, sink)
    assert summary["status"] == "completed" and sorted(sink.steps) == [1, 2]
    outcomes = ("passed", "wrong", "errors", "timeouts", "memory", "output_limit", "blocked", "no_code")
    for m in sink.steps.values():
        counts = {k: m[f"sandbox/{k}"] for k in outcomes}
        assert sum(counts.values()) == m["rollout/generated"]  # every rollout has exactly one outcome
        assert 0.0 <= m["reward/test_pass_rate"] <= 1.0
        assert m["reward/mean"] == pytest.approx(counts["passed"] / m["rollout/generated"])
    total = {k: sum(m[f"sandbox/{k}"] for m in sink.steps.values()) for k in ("passed", "wrong")}
    assert total["passed"] > 0 and total["wrong"] > 0, total  # the sandbox really ran programs, both ways
    before = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).state_dict()
    after = load_latest_checkpoint(tmp_path)["model"]
    assert max((after[k] - before[k]).abs().max().item() for k in before) > 1e-6, "parameters did not change"
    final = sink.evals[2]
    assert set(final) == {"APPS", "CodeContests", "overall"}
    for name in ("APPS", "CodeContests"):
        assert final[name]["per_problem"] == [[2, c] for _, c in final[name]["per_problem"]]
        assert 0.0 <= final[name]["avg_at_k"] <= final[name]["pass_at_k"] <= 1.0
