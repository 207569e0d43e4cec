"""Knapsack RL and GRESO end to end on the shipped tiny preset with a finite training set: their
history is in the checkpoint, and a resumed run reproduces the metrics of an uninterrupted one
(timings aside); every step stays within GRPO's budget."""

import json

import pytest

from trainer.spec.config import parse_run_config
from trainer.embedded.checkpoint import load_latest_checkpoint
from trainer.platform.run import run_training
from trainer.platform.sinks import JsonlSink

# 8 problems, 4 per step: an epoch every 2 steps, so the history is used from step 3 on.
BASE = {"preset": "tiny", "steps": 6, "batch_prompts": 4, "n_total": 8, "train_size": 8, "eval_every": 0,
        "eval_problems": 4, "eval_n": 2, "checkpoint_every": 3, "optim": {"lr": 1e-3}}


def _metrics(d):
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: {k: v for k, v in r.items() if not k.startswith(("time/", "system/"))} for r in rows}


@pytest.mark.parametrize("method,key", [("knapsack", "rate"), ("greso", "streak")])
def test_history_is_checkpointed_and_a_resumed_run_is_the_same(tmp_path, method, key):
    cfg = parse_run_config({**BASE, "method": method})
    run_training(cfg, tmp_path / "a", JsonlSink(tmp_path / "a"))
    calls = {"n": 0}

    def stop_after_four():
        calls["n"] += 1
        return calls["n"] > 4

    first = run_training(cfg, tmp_path / "b", JsonlSink(tmp_path / "b"), should_stop=stop_after_four)
    assert first["status"] == "stopped" and first["last_step"] == 4
    state = load_latest_checkpoint(tmp_path / "b")["method_state"][method]
    assert state["clock"] == 4 and len(state[key]) == 8  # two epochs: every prompt has a history
    second = run_training(cfg, tmp_path / "b", JsonlSink(tmp_path / "b"))
    assert second["status"] == "completed" and second["last_step"] == 6
    a, b = _metrics(tmp_path / "a"), _metrics(tmp_path / "b")
    assert sorted(b) == list(range(1, 7)) and a == b
    assert all(m["rollout/generated"] <= 8 * 4 for m in a.values())  # GRPO's n_total * P
    if method == "knapsack":
        assert a[1]["knapsack/seen"] == 0 and all(a[s]["knapsack/seen"] == 4 for s in range(3, 7))
