"""`aero bench --shape`: the paper-scale cost bench, end to end on the CPU shape (tiny-151k: the
real 151,936-token vocabulary), with a small step so it runs in seconds."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli.main import app

runner = CliRunner()
SMALL = ["--set", "batch_prompts=4", "--set", "n_total=4", "--set", "aero.n_explore=2", "--set", "max_new_tokens=32",
         "--set", "max_prompt_tokens=48"]


def test_bench_shape_reports_split_rates_memory_and_ratios(tmp_path, monkeypatch):
    monkeypatch.setenv("AERO_PEAK_FLOPS", "1e12")  # a CPU has no table entry: the override gives an MFU
    report, runs = tmp_path / "bench.json", tmp_path / "runs"
    res = runner.invoke(app, ["bench", "--shape", "tiny-151k", "--steps", "2", "--json", str(report),
                              "--out", str(runs), *SMALL])
    assert res.exit_code == 0, res.output
    assert "scripted" in res.output and "no learning is measured" in res.output and "aero/grpo" in res.output
    data = json.loads(report.read_text())
    meta = data["meta"]
    assert (meta["shape"], meta["n_params"], meta["device"], meta["peak_flops"]) == ("tiny-151k", 9_847_360, "cpu", 1e12)
    assert "no learning is measured" in meta["rewards"] and meta["base"].startswith("shape tiny-151k")
    cfg = meta["config"]
    assert (cfg["task"], cfg["batch_prompts"], cfg["n_total"], cfg["max_new_tokens"], cfg["eval_every"]) == (
        "strata", 4, 4, 32, 0)
    assert set(data["methods"]) == {"grpo", "dapo", "aero"} and set(data["ratios"]) == {"dapo/grpo", "aero/grpo", "aero/dapo"}
    assert meta["warmup_steps_excluded"] == 1  # the means are step 2's: step 1 pays the device's warm-up
    for name, m in data["methods"].items():
        assert m["steps"] == 2 and m["eval"] == {}
        assert 0 < m["tokens_generated"] <= m["rollouts_generated"] * 32  # real tokens, at most the cap per row
        rows = [json.loads(x) for x in (runs / name / "metrics.jsonl").read_text().splitlines()]
        assert m["step_s"] == pytest.approx(rows[1]["time/step_s"]) and m["first_step_s"] == rows[0]["time/step_s"]
        assert m["tokens_trained"] == rows[1]["tokens/trained"] and sum(r["tokens/trained"] for r in rows) > 0
        assert m["generate_tokens_per_s"] == pytest.approx(m["tokens_generated"] / m["rollout_s"])
        if m["train_s"] > 0:  # DAPO may keep no group at 4 prompts
            assert m["train_tokens_per_s"] == pytest.approx(m["tokens_trained"] / m["train_s"])
        assert m["other_s"] == pytest.approx(m["step_s"] - m["rollout_s"] - m["train_s"])
        if m["train_s"] > 0:
            assert m["mfu"] == pytest.approx(m["flops_train"] / m["train_s"] / 1e12)
        assert m["peak_memory_mb"] > 0 and m["peak_memory_device_mb"] > 0  # Linux: VmHWM, reset per step
        steps = [json.loads(x)["step"] for x in (runs / name / "metrics.jsonl").read_text().splitlines()]
        assert steps == [1, 2]
        assert not (runs / name / "checkpoints").exists()  # a shape bench skips the end-of-run checkpoint
    g, a = data["methods"]["grpo"], data["methods"]["aero"]
    assert g["rollouts_generated"] == 16  # 4 prompts x n_total 4
    for field in ("step_s", "rollout_s", "train_s", "flops_train", "flops_total", "tokens_trained"):
        assert data["ratios"]["aero/grpo"][field] == pytest.approx(a[field] / g[field])


def test_bench_shape_refuses_unknown_shapes_and_several_seeds():
    bad = runner.invoke(app, ["bench", "--shape", "llama-70b"])
    assert bad.exit_code == 2 and "qwen2.5-1.5b" in bad.output
    seeds = runner.invoke(app, ["bench", "--shape", "tiny-151k", "--seeds", "0,1"])
    assert seeds.exit_code == 2 and "--seeds" in seeds.output

