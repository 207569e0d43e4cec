"""The `aero` trainer commands, run in-process through Typer's runner."""

import json

from typer.testing import CliRunner

from cli.main import app

runner = CliRunner()
SMALL = ["--set", "batch_prompts=4", "--set", "eval_problems=4", "--set", "eval_n=4", "--set", "eval_every=0"]


def test_train_writes_metrics_and_config(tmp_path):
    out = tmp_path / "run"
    res = runner.invoke(app, ["train", "--method", "aero", "--steps", "2", "--out", str(out), *SMALL])
    assert res.exit_code == 0, res.output
    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert json.loads((out / "config.json").read_text())["method"] == "aero"
    assert "final Avg@4" in res.output


def test_train_refuses_bad_config_naming_the_field(tmp_path):
    res = runner.invoke(app, ["train", "--steps", "2", "--out", str(tmp_path), "--set", "aero.k=0.5"])
    assert res.exit_code == 2
    assert "aero.k" in res.output and "nothing was run" in res.output
    assert not (tmp_path / "metrics.jsonl").exists()


def test_bench_json_has_methods_and_ratios(tmp_path):
    report = tmp_path / "bench.json"
    res = runner.invoke(app, ["bench", "--steps", "2", "--json", str(report), "--out", str(tmp_path / "runs"), *SMALL])
    assert res.exit_code == 0, res.output
    data = json.loads(report.read_text())
    assert set(data["methods"]) == {"grpo", "dapo", "aero"}
    assert set(data["ratios"]) == {"aero/grpo", "aero/dapo"}
    g, a = data["methods"]["grpo"], data["methods"]["aero"]
    assert data["ratios"]["aero/grpo"]["flops_train"] == a["flops_train"] / g["flops_train"]
    assert a["rollouts_generated"] <= g["rollouts_generated"]
    assert "aero/grpo" in res.output and "Avg@4" in res.output


def test_eval_prints_a_table():
    res = runner.invoke(app, ["eval", "--n", "2", "--problems", "4"])
    assert res.exit_code == 0, res.output
    assert "overall" in res.output and "Pass@2" in res.output
