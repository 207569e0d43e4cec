"""The real model trains on the embedded engine: every method, both generated tasks, two steps
each from the installed smollm2-135m (134.5M parameters, a 49,152-token vocabulary, its chat
template); a run stopped mid-way resumes exactly. Small batches: the point is that every path
runs on a real architecture and tokenizer, not what it learns (BENCHMARKS.md measures that)."""

import json
import math

import pytest

from trainer.spec.config import for_method, parse_run_config
from trainer.platform.run import run_training
from trainer.methods.spec import method_names
from trainer.platform.sinks import JsonlSink, MemorySink

SMALL = {"preset": "smollm2-135m", "steps": 2, "batch_prompts": 2, "n_total": 4, "max_new_tokens": 6,
         "eval_every": 0, "eval_problems": 1, "eval_n": 2, "checkpoint_every": 0, "device": "cpu",
         "train_size": 16, "optim": {"lr": 1e-4, "warmup_steps": 0},
         "aero": {"n_explore": 2, "n_max": 6}, "dapo": {"overlong_buffer": 2}, "speed": {"n_screen": 2},
         "pilot_commit": {"pilot_frac": 0.5}}
TIMING = ("time/", "system/", "savings/s1_s", "savings/s2_s", "savings/s3_s")


def small(method: str, **kw):
    return parse_run_config(for_method({**SMALL, "method": method, **kw}, method))


@pytest.mark.parametrize("method", method_names())
def test_every_method_trains_the_real_model(method, smollm2, tmp_path):
    from safetensors.torch import load_file

    from trainer.embedded.checkpoint import load_latest_checkpoint

    sink = MemorySink()
    summary = run_training(small(method), tmp_path, sink)
    assert summary["status"] == "completed" and sorted(sink.steps) == [1, 2]
    m = sink.steps[2]
    assert m["rollout/generated"] <= 2 * 4 and m["tokens/generated"] > 0
    assert m["flops/total"] == pytest.approx(m["flops/rollout"] + m["flops/train"])
    base, after = load_file(str(smollm2 / "model.safetensors")), load_latest_checkpoint(tmp_path)["model"]
    moved = max((after[k].float() - base[k].float()).abs().max().item() for k in base)
    # DAPO's filter can leave nothing to train (every group zero-variance): then nothing may move
    trained = sum(s["rollout/trained"] for s in sink.steps.values())
    assert (moved > 0) == (trained > 0), (moved, trained)
    assert all(math.isfinite(s["train/grad_norm"]) for s in sink.steps.values() if s["rollout/trained"])
    assert "overall" in sink.evals[2]


def test_countdown_trains_and_its_rollouts_are_real_text(smollm2, tmp_path):
    run_training(small("aero", task="countdown"), tmp_path, JsonlSink(tmp_path))
    details = [json.loads(ln) for ln in (tmp_path / "details.jsonl").read_text().splitlines()]
    rows = [r for d in details for r in d["detail"]["rollouts"]]
    assert rows and all("Using the numbers" in r["prompt"] and "assistant" in r["prompt"] for r in rows)
    assert any(any(c.isalpha() for c in r["response"]) for r in rows)  # words, not char-preset digits


def test_a_stopped_real_model_run_resumes_exactly(smollm2, tmp_path):
    """Stopped after step 1 (which checkpoints it), then resumed: step 2 equals an uninterrupted
    run's, which wrote no checkpoint before its end, so saving one moves nothing either."""
    cfg = small("aero")
    run_training(cfg, tmp_path / "a", JsonlSink(tmp_path / "a"))
    calls = {"n": 0}

    def stop_after_one():
        calls["n"] += 1
        return calls["n"] > 1

    first = run_training(cfg, tmp_path / "b", JsonlSink(tmp_path / "b"), should_stop=stop_after_one)
    assert first["status"] == "stopped" and first["last_step"] == 1  # a cancel stops cleanly with a checkpoint
    second = run_training(cfg, tmp_path / "b", JsonlSink(tmp_path / "b"))
    assert second["status"] == "completed" and second["last_step"] == 2

    def metrics(d):
        rows = [json.loads(ln) for ln in (d / "metrics.jsonl").read_text().splitlines()]
        return {r["step"]: {k: v for k, v in r.items() if not k.startswith(TIMING)} for r in rows}

    assert sorted(metrics(tmp_path / "b")) == [1, 2]
    assert metrics(tmp_path / "a") == metrics(tmp_path / "b")


def test_a_prompt_cap_below_the_chat_questions_is_refused_before_compute(smollm2):
    from trainer.spec.config import ConfigError
    from trainer.embedded.presets import load_setup

    with pytest.raises(ConfigError) as e:
        load_setup(small("grpo", task="countdown", max_prompt_tokens=40))
    (field, msg), = e.value.issues
    assert field == "max_prompt_tokens" and "countdown" in msg and "at least" in msg
