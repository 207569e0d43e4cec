"""Pure figure and table builders (dashboard/charts.py, dashboard/tables.py): hand-computed values."""

from __future__ import annotations

import pytest

from dashboard import charts, tables

# ---------------------------------------------------------------- charts


def test_each_method_has_its_own_fixed_colour():
    assert len(set(charts.METHOD_COLORS.values())) == len(charts.METHOD_COLORS) == 5
    assert charts.method_color("aero") == "#E45756" and charts.method_color("unknown") == charts.OTHER_COLOR


@pytest.mark.parametrize("value,unit,text", [(1.23e12, "FLOP", "1.23 TFLOP"), (0.5, "s", "0.5 s"), (0, "s", "0 s"),
                                             (61_440_000_000, "FLOP", "61.4 GFLOP"), (None, "s", "–"), (1500, "", "1.5 k")])
def test_si(value, unit, text):
    assert charts.si(value, unit) == text


def test_waterfall_bars_float_from_baseline_down_to_final():
    wf = {"baseline": 10.0, "s1": 3.0, "s2": 2.0, "s3": 1.0, "final": 4.0}
    fig = charts.waterfall_figure(wf, "seconds", title="t")
    bar = fig.data[0]
    assert list(bar.y) == [10.0, 3.0, 2.0, 1.0, 4.0]
    assert list(bar.base) == [0.0, 7.0, 5.0, 4.0, 0.0]  # each saving ends where the next begins
    assert bar.marker.color[0] == charts.METHOD_COLORS["grpo"] and bar.marker.color[-1] == charts.METHOD_COLORS["aero"]
    assert bar.text[1] == "−3 s<br>(30%)" and bar.text[4] == "4 s<br>(40% of GRPO)"
    assert fig.layout.yaxis.title.text == "training seconds per step"
    assert [sh.y0 for sh in fig.layout.shapes] == [10.0, 7.0, 5.0, 4.0]  # connectors at the running level


def test_waterfall_marks_unused_strategies_and_costs():
    fig = charts.waterfall_figure({"baseline": 10.0, "s1": -1.0, "s2": None, "s3": None, "final": 11.0}, "flops", title="t")
    bar = fig.data[0]
    assert bar.text[2] == "not used" and bar.y[2] == 0.0
    assert bar.marker.color[1] == "#D62728" and list(bar.base)[:2] == [0.0, 10.0]  # a negative saving costs


def test_zero_acc_compare_draws_explore_only_when_it_differs():
    fig = charts.zero_acc_compare_figure([("#1 GRPO", "grpo", [1, 2], [0.5, 0.4], [0.5, 0.4]),
                                          ("#2 AERO", "aero", [1, 2], [0.5, 0.4], [0.3, 0.2])])
    names = [t.name for t in fig.data]
    assert names == ["#1 GRPO (mean 45.0%)", "#2 AERO (mean 25.0%)", "#2 AERO: after explore"]
    assert fig.data[1].line.color == fig.data[2].line.color == charts.METHOD_COLORS["aero"] and fig.data[2].line.dash == "dot"
    assert fig.layout.yaxis.tickformat == ".0%"


def test_run_figures_name_their_units():
    steps = [1, 2]
    s = {"time/rollout_s": [1.0, 1.0], "time/train_s": [2.0, 3.0], "flops/rollout": [1e9, 1e9], "flops/train": [2e9, 2e9]}
    assert charts.time_split_figure(steps, s).layout.yaxis.title.text == "seconds"
    fl = charts.flops_figure(steps, s)
    assert fl.layout.yaxis.title.text == "FLOPs" and [t.name for t in fl.data] == ["rollout", "train"]
    assert charts.reward_figure(steps, {"reward/mean": [0.1, 0.2]}, "grpo").data[0].line.color == charts.METHOD_COLORS["grpo"]


def test_table_figure_bolds_flagged_cells():
    fig = charts.table_figure(["a", "b"], [["1", "2"], ["3", "4"]], [[False, True], [True, False]])
    assert list(fig.data[0].cells.values[0]) == ["1", "<b>3</b>"] and list(fig.data[0].cells.values[1]) == ["<b>2</b>", "4"]


# ---------------------------------------------------------------- tables


def test_cumulative_is_exact_without_gaps_and_weights_decimated_points():
    assert tables.cumulative([1, 2, 3], [1.0, 2.0, None]) == [1.0, 3.0, 3.0]
    assert tables.cumulative([1, 4, 10], [2.0, 2.0, 1.0]) == [2.0, 8.0, 14.0]  # 2 + 2*3 + 1*6


def test_x_values_prefers_logged_elapsed_time():
    payload = {"steps": [1, 3], "series": {"time/step_s": [1.0, 2.0], "flops/total": [10.0, 10.0]}}
    assert tables.x_values(payload, "time") == [1.0, 5.0]
    assert tables.x_values(payload, "flops") == [10.0, 30.0]
    payload["series"]["time/elapsed_s"] = [1.5, 4.5]
    assert tables.x_values(payload, "time") == [1.5, 4.5]
    with pytest.raises(ValueError):
        tables.x_values(payload, "tokens")


def test_smooth_trailing_mean_skips_gaps():
    assert tables.smooth([1.0, 3.0, None, 5.0], 2) == [1.0, 2.0, None, 4.0]
    assert tables.smooth([1.0, None], 1) == [1.0, None]


def ev(step, avg, pas, k=8, bench="L1"):
    return {"benchmark": bench, "step": step, "k": k, "n": 8, "avg_at_k": avg, "pass_at_k": pas,
            "avg_ci": [avg - 0.1, avg + 0.1], "pass_ci": [pas - 0.1, pas + 0.1]}


def test_latest_evals_and_bench_order():
    rows = [ev(10, 0.1, 0.2), ev(20, 0.3, 0.4), ev(20, 0.5, 0.6, bench="overall"), ev(5, 0.2, 0.2, bench="A")]
    latest = tables.latest_evals(rows)
    assert latest["L1"]["step"] == 20 and tables.bench_order(list(latest)) == ["A", "L1", "overall"]


def test_benchmark_table_bold_best_ratios_and_cis():
    entries = [
        {"run_id": 1, "label": "#1 GRPO", "method": "grpo", "time_s": 2.0, "flops": 4e9,
         "evals": {"L1": ev(30, 0.40, 0.70), "overall": ev(30, 0.40, 0.70, bench="overall")}},
        {"run_id": 2, "label": "#2 AERO", "method": "aero", "time_s": 1.0, "flops": 2e9,
         "evals": {"L1": ev(30, 0.44, 0.70), "overall": ev(30, 0.50, 0.60, bench="overall")}},
    ]
    t = tables.benchmark_table(entries, baseline_id=1)
    assert t.columns == ["run", "time / step", "FLOPs / step", "Avg@8 L1", "Avg@8 total", "Pass@8 L1", "Pass@8 total"]
    assert t.rows[0][0] == "#1 GRPO (baseline)"
    assert t.rows[1][1] == "1 s (0.50×)" and t.rows[1][2] == "2 GFLOP (0.50×)"
    assert t.rows[1][4] == "0.500 (1.25×)<br>[0.40, 0.60]"
    assert t.rows[1][3] == "0.440<br>[0.34, 0.54]"  # per-benchmark cells: no ratio
    # best: lower cost, higher accuracy; a column where every run is equal has no bold
    assert t.bold == [[False, False, False, False, False, False, True],
                      [False, True, True, True, True, False, False]]
    passes = t.part(("Pass@",))
    assert passes.columns == ["run", "Pass@8 L1", "Pass@8 total"] and passes.bold == [[False, False, True], [False, False, False]]
    assert passes.rows[1] == ["#2 AERO", "0.700<br>[0.60, 0.80]", "0.600 (0.86×)<br>[0.50, 0.70]"]
    f = t.frame.set_index("run_id")
    assert f.loc[2, "avg_at_k:overall:ratio"] == pytest.approx(1.25) and f.loc[2, "avg_at_k:overall:ci_lo"] == pytest.approx(0.4)
    assert f.loc[1, "baseline"] and not f.loc[2, "baseline"]


def test_best_marks_every_tied_best_but_not_a_uniform_column():
    assert tables._best([0.5, 0.7, 0.7, None], higher=True) == [False, True, True, False]
    assert tables._best([2.0, 1.0, 1.0], higher=False) == [False, True, True]
    assert tables._best([0.0, 0.0], higher=True) == [False, False] and tables._best([0.3], higher=True) == [False]


def test_benchmark_table_without_evals_keeps_cost_columns():
    t = tables.benchmark_table([{"run_id": 5, "label": "#5", "method": "dapo", "time_s": None, "flops": 1e9, "evals": {}}], 5)
    assert t.columns == ["run", "time / step", "FLOPs / step"] and t.rows == [["#5 (baseline)", "–", "1 GFLOP (1.00×)"]]


def test_runs_frame_and_last_values():
    run = {"id": 3, "name": "x", "method": "aero-s1", "status": "failed", "progress": 0.5, "current_step": 5, "total_steps": 10,
           "tags": ["a", "b"], "sweep_id": None, "created_at": "2026-11-30T01:02:03", "error": "Traceback\n  ...\nValueError: bad\n"}
    payload = {"steps": [4, 5], "series": {"reward/mean": [0.2, None], "time/step_s": [1.0, 2.0]}}
    last = tables.last_values(payload)
    assert last == {"reward/mean": 0.2, "time/step_s": 2.0}
    row = tables.runs_frame([run], {3: last}).iloc[0]
    assert (row["method"], row["step"], row["reward"], row["tags"], row["message"], row["open"]) == (
        "AERO S1 only", "5/10", 0.2, "a, b", "ValueError: bad", "./run?run=3")
    assert row["created"] == "11-30 01:02"


def test_drop_empty():
    import pandas as pd

    df = pd.DataFrame({"a": [None, float("nan")], "b": ["", ""], "c": ["", "x"], "d": [None, None]})
    assert list(tables.drop_empty(df, ("a", "b", "c")).columns) == ["c", "d"]


def test_sweep_helpers():
    runs = [{"sweep_id": 2}, {"sweep_id": None}, {"sweep_id": 5}, {"sweep_id": 2}]
    assert tables.sweep_ids(runs) == [5, 2]
    sweep = {"runs": [{"status": "succeeded", "progress": 1.0}, {"status": "failed", "progress": 0.2},
                      {"status": "running", "progress": 0.5}, {"status": "queued", "progress": 0.0}]}
    assert tables.sweep_progress(sweep) == pytest.approx((1 + 1 + 0.5 + 0) / 4)
