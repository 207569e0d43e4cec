"""The arena's leaderboard (trainer/bench/arena.py) on hand-built bench reports: the paired
test over problems, per-seed compute to reach with 'not reached' kept, the baseline row."""

from __future__ import annotations

import pytest

import common.metric_keys as mk
from trainer.bench.arena import FIELDS, leaderboard, significance
from trainer.bench.table import render_leaderboard


def _report(seed: int, x_correct: int, reach_x: dict | None):
    def run(correct):
        return {"last_per_problem": {mk.OVERALL: [[4, correct]] * 3}}

    runs = {"grpo": [{"fraction": f, "reached": True, "flops": 100.0 * f, "seconds": 10.0 * f, "tokens": 4000.0 * f}
                     for f in (0.5, 0.75, 0.9, 1.0)],
            "x": [{"fraction": f, "reached": False, "flops": None, "seconds": None} for f in (0.5, 0.75, 0.9, 1.0)]}
    if reach_x:
        runs["x"][0] = {"fraction": 0.5, "reached": True, **reach_x}
    return {"meta": {"seed": seed}, "methods": {"grpo": run(0), "x": run(x_correct)}, "reach": {"runs": runs}}


def _summary():
    ci = {"mean": 1.0, "lo": 0.5, "hi": 1.5, "n": 2}
    methods = {m: {"final_avg_at_k": {mk.OVERALL: ci}, **{f: ci for f in FIELDS}} for m in ("grpo", "x")}
    return {"methods": methods, "ratios": {"x/grpo": {"final_diff": ci}}}


def test_paired_test_by_hand():
    # x solves every problem, GRPO none, on both seeds: three problems with difference 1; of the
    # 2^3 sign flips only all-plus and all-minus reach |sum| = 3, so p = 2/8.
    reports = [_report(0, 4, None), _report(1, 4, None)]
    t = significance(reports, "x", "grpo")
    assert t["diff"] == 1.0 and t["p_value"] == pytest.approx(0.25) and t["problems"] == 3
    assert significance(reports, "grpo", "grpo")["p_value"] == 1.0


def test_leaderboard_keeps_not_reached_per_seed():
    reports = [_report(0, 4, {"flops": 30.0, "seconds": 3.0, "tokens": 2500.0}), _report(1, 2, None)]
    rows = leaderboard(reports, _summary(), "grpo")
    base, x = rows
    assert base["baseline"] and base["test"] is None and base["diff"] is None
    half = x["reach"][0]
    assert half["fraction"] == 0.5 and (half["reached"], half["of"]) == (1, 2)
    assert [s["flops"] for s in half["seeds"]] == [30.0, None] and half["flops"]["mean"] == 30.0
    assert [t["fraction"] for t in x["reach"]] == [0.5, 0.75, 0.9]
    assert x["reach"][1]["reached"] == 0 and x["reach"][1]["flops"]["mean"] is None
    md = render_leaderboard(rows, 8, "grpo")
    assert "1/2: s0 0; s1 not reached" in md  # 30 FLOPs show as 0 GFLOPs
    assert "diff vs grpo" in md and "**grpo**" in md
    assert "1/2: s0 2; s1 not reached" in md  # 2,500 tokens to reach, in thousands
    assert "2/2: s0 2; s1 2" in md  # GRPO's own 2,000 tokens at 50%
    assert md.splitlines()[2].endswith("| wasted FLOPs |")
