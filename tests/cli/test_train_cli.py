"""The `aero` trainer commands, run in-process through Typer's runner."""

import json
import shutil

from typer.testing import CliRunner

from cli.main import app
from trainer.embedded.presets import PRESETS

runner = CliRunner()
SMALL = ["--set", "batch_prompts=4", "--set", "eval_problems=4", "--set", "eval_n=4", "--set", "eval_every=0"]


def test_train_writes_metrics_and_config(tmp_path):
    out = tmp_path / "run"
    res = runner.invoke(app, ["train", "--method", "aero", "--steps", "2", "--out", str(out), *SMALL])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
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
    assert set(data["ratios"]) == {"aero/grpo", "aero/dapo", "dapo/grpo"}  # every pair, in display order
    g, a = data["methods"]["grpo"], data["methods"]["aero"]
    assert data["ratios"]["aero/grpo"]["flops_train"] == a["flops_train"] / g["flops_train"]
    assert a["rollouts_generated"] <= g["rollouts_generated"]
    assert "aero/grpo" in res.output and "Avg@4" in res.output
    # each method's run directory keeps its metrics and evals, as `aero train` does
    for m in ("grpo", "dapo", "aero"):
        lines = (tmp_path / "runs" / m / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(x)["step"] for x in lines] == [1, 2]
        assert (tmp_path / "runs" / m / "evals.jsonl").exists()
    assert data["meta"]["base"].startswith("preset tiny")


def test_bench_reports_the_model_path_it_started_from_and_compute_to_reach(tmp_path):
    tiny_hf_model = tmp_path / "my-base"
    shutil.copytree(PRESETS["tiny"], tiny_hf_model)
    report = tmp_path / "bench.json"
    res = runner.invoke(app, ["bench", "--steps", "2", "--methods", "grpo,aero", "--json", str(report),
                              "--out", str(tmp_path / "runs"), "--set", f"model_path={tiny_hf_model}",
                              "--set", "eval_every=1", *SMALL[:-2]])
    assert res.exit_code == 0, res.output
    data = json.loads(report.read_text())
    assert data["meta"]["base"] == str(tiny_hf_model) and data["meta"]["preset"] is None
    curve = data["methods"]["grpo"]["curve"]
    assert curve["steps"] == [0, 1, 2] and curve["flops"][0] == 0.0 and curve["flops"][2] > curve["flops"][1] > 0
    # the base (step 0) is evaluated with the same draws by every method
    assert data["methods"]["aero"]["curve"]["avg_at_k"][0] == curve["avg_at_k"][0]
    assert data["reach"]["baseline"] == "grpo" and "Compute to reach" in res.output


def test_bench_over_seeds_reports_intervals(tmp_path):
    report = tmp_path / "bench.json"
    res = runner.invoke(app, ["bench", "--steps", "1", "--seeds", "0,1", "--methods", "grpo,aero", "--json", str(report),
                              "--out", str(tmp_path / "runs"), *SMALL])
    assert res.exit_code == 0, res.output
    data = json.loads(report.read_text())
    assert data["meta"]["seeds"] == [0, 1] and len(data["seeds"]) == 2
    assert (tmp_path / "runs" / "seed1" / "aero" / "metrics.jsonl").exists()
    step = data["summary"]["methods"]["grpo"]["step_s"]
    assert step["n"] == 2 and step["lo"] <= step["mean"] <= step["hi"]
    assert data["summary"]["ratios"]["aero/grpo"]["flops_total"]["n"] == 2
    assert "2 seeds" in res.output and "± " in res.output
    bad = runner.invoke(app, ["bench", "--seeds", "0,x"])
    assert bad.exit_code == 2 and "--seeds" in bad.output


def test_eval_prints_a_table():
    res = runner.invoke(app, ["eval", "--n", "2", "--problems", "4"])
    assert res.exit_code == 0, res.output
    assert "overall" in res.output and "Pass@2" in res.output


def test_bench_arena_gives_a_leaderboard_against_grpo(tmp_path):
    report = tmp_path / "bench.json"
    res = runner.invoke(app, ["bench", "--steps", "2", "--seeds", "0,1", "--methods", "grpo,knapsack,speed,greso",
                              "--json", str(report), "--out", str(tmp_path / "runs"), "--set", "train_size=8",
                              "--set", "eval_every=1", *SMALL[:-2]])
    assert res.exit_code == 0, res.output
    board = json.loads(report.read_text())["summary"]["leaderboard"]
    assert [r["method"] for r in board] == ["grpo", "knapsack", "speed", "greso"]
    assert board[0]["baseline"] and board[0]["test"] is None
    for row in board[1:]:
        assert 0.0 <= row["test"]["p_value"] <= 1.0 and row["test"]["problems"] > 0
        assert row["rollouts_generated"]["mean"] <= board[0]["rollouts_generated"]["mean"]  # never above GRPO's budget
        assert [t["fraction"] for t in row["reach"]] == [0.5, 0.75, 0.9]
        assert all(len(t["seeds"]) == 2 for t in row["reach"])  # every seed kept, reached or not
    assert "Leaderboard (equal rollout budget" in res.output and "diff vs grpo" in res.output
    refused = runner.invoke(app, ["bench", "--steps", "1", "--methods", "grpo,knapsack", "--out", str(tmp_path / "r2"), *SMALL])
    assert refused.exit_code == 2 and "train_size" in refused.output
