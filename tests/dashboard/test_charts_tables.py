"""Pure figure and table builders (dashboard/plotting.py, run_charts.py, compare_charts.py,
waterfall_chart.py, arena_chart.py, tables.py, reach_tables.py): hand-computed values. The
method colours come from a MethodStyle built from the specs, as the app builds it from
GET /api/methods; the number formats themselves are tested in tests/common/test_fmt.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from common.fmt import acc_text, pct, reach_cell, si, stat_text
from dashboard import compare_charts, plotting, reach_tables, run_charts, tables
from dashboard.arena_chart import arena_figure
from dashboard.method_style import NO_METHODS, OTHER_COLOR, MethodStyle
from dashboard.waterfall_chart import waterfall_figure
from trainer.methods.spec import method_names, specs

# The specs GET /api/methods serves (the app loads them over HTTP; these builders are pure).
STYLE = MethodStyle.from_specs([s.to_json() for s in specs()])
COLORS = {m: STYLE.color(m) for m in STYLE.names}

# ---------------------------------------------------------------- charts


def test_each_method_has_its_own_fixed_colour():
    assert len(set(COLORS.values())) == len(COLORS) == len(method_names())
    assert STYLE.color("aero") == "#E45756" and STYLE.color("unknown") == OTHER_COLOR
    assert STYLE.label("aero-s1") == "AERO S1 only" and STYLE.label("unknown") == "unknown"
    # the colours docs/dashboard.md lists, as they were with the old module-level registry
    assert {m: COLORS[m] for m in ("grpo", "dapo", "aero-s1", "aero-s1s2", "aero")} == {
        "grpo": "#4C78A8", "dapo": "#F58518", "aero-s1": "#72B7B2", "aero-s1s2": "#B279A2", "aero": "#E45756"}
    assert STYLE.baseline == "grpo" and STYLE.rescues("aero") and not STYLE.rescues("grpo")


def test_a_spec_colour_that_is_not_hex_is_never_drawn():
    bad = MethodStyle.from_specs([{**specs()[0].to_json(), "colour": "red;background:url(x)"}])
    assert bad.color(specs()[0].name) == OTHER_COLOR and STYLE.color(specs()[0].name) != OTHER_COLOR  # no shared state


def test_without_specs_every_method_is_grey_under_its_own_name():
    assert NO_METHODS.color("aero") == OTHER_COLOR and NO_METHODS.label("aero") == "aero" and NO_METHODS.names == ()
    assert NO_METHODS.baseline == "grpo" and NO_METHODS.dash_by_method(["aero", "aero"]) == ["solid", "dash"]
    fig = run_charts.reward_figure([1, 2], {"reward/mean": [0.1, 0.2]}, "aero", style=NO_METHODS)
    assert fig.data[0].line.color == OTHER_COLOR and "rescue" not in fig.data[0].name


def test_the_style_is_a_value():
    again = MethodStyle.from_specs([s.to_json() for s in specs()])
    assert again == STYLE and hash(again) == hash(STYLE)
    with pytest.raises(AttributeError):
        STYLE.baseline = "aero"  # type: ignore[misc]


def test_waterfall_bars_float_from_baseline_down_to_final():
    wf = {"baseline": 10.0, "s1": 3.0, "s2": 2.0, "s3": 1.0, "final": 4.0}
    fig = waterfall_figure(wf, "seconds", style=STYLE, title="t")
    bar = fig.data[0]
    assert list(bar.y) == [10.0, 3.0, 2.0, 1.0, 4.0]
    assert list(bar.base) == [0.0, 7.0, 5.0, 4.0, 0.0]  # each saving ends where the next begins
    assert bar.marker.color[0] == COLORS["grpo"] and bar.marker.color[-1] == COLORS["aero"]
    assert bar.text[1] == "−3 s<br>(30.0%)" and bar.text[4] == "4 s<br>(40.0% of GRPO)"  # the one percentage format
    assert fig.layout.yaxis.title.text == "training seconds per step"
    assert [sh.y0 for sh in fig.layout.shapes] == [10.0, 7.0, 5.0, 4.0]  # connectors at the running level
    assert bar.text[0] == "10 s" and "counterfactual" not in bar.hovertext[0]  # measured: the GRPO bar is GRPO runs


def test_counterfactual_waterfall_says_what_its_grpo_bar_is_and_shows_the_measured_one():
    wf = {"baseline": 10.0, "s1": 3.0, "s2": 2.0, "s3": 1.0, "final": 4.0}
    fig = waterfall_figure(wf, "seconds", style=STYLE, title="t", counterfactual=True, measured_grpo=(8.0, "GRPO run #1, measured"))
    bar = fig.data[0]
    assert bar.x[0] == "GRPO" and bar.text[0] == "10 s<br>counterfactual"
    assert "what the AERO run trained plus the savings" in bar.hovertext[0]
    assert "not the GRPO run's measured step time" in bar.hovertext[0]
    line = [sh for sh in fig.layout.shapes if sh.line.dash == "dash"]
    assert [sh.y0 for sh in line] == [8.0] and line[0].line.color == COLORS["grpo"]
    assert fig.layout.annotations[0].text == "GRPO run #1, measured: 8 s"


def test_waterfall_marks_unused_strategies_and_costs():
    fig = waterfall_figure({"baseline": 10.0, "s1": -1.0, "s2": None, "s3": None, "final": 11.0}, "flops", style=STYLE,
                           title="t")
    bar = fig.data[0]
    assert bar.text[2] == "not used" and bar.y[2] == 0.0
    assert bar.marker.color[1] == "#D62728" and list(bar.base)[:2] == [0.0, 10.0]  # a negative saving costs


def test_a_flat_count_starts_at_zero_with_whole_ticks():
    steps = list(range(1, 11))
    fig = run_charts.rollouts_figure(steps, {"rollout/generated": [1024] * 10, "rollout/trained": [1024] * 10}, "grpo",
                                     style=STYLE)
    assert list(fig.layout.yaxis.range) == pytest.approx([0, 1126.4]) and fig.layout.yaxis.tickformat == ",d"
    small = run_charts.rollouts_figure(steps, {"rollout/generated": [4] * 10, "rollout/trained": [2, 3] * 5}, "aero",
                                       style=STYLE)
    assert small.layout.yaxis.rangemode == "tozero" and (small.layout.yaxis.tick0, small.layout.yaxis.dtick) == (0, 1)
    strata = run_charts.strata_figure([1, 2], {"strata/rescue": [1, 2], "strata/low": [1, 1], "strata/high": [2, 1]})
    assert strata.layout.yaxis.dtick == 1  # 4 prompts: 0, 1, 2, 3, 4, not 0.5


def test_a_nearly_flat_series_gets_a_padded_range_and_a_varying_one_autoscales():
    flat = plotting.lines_figure([plotting.Curve("a", "grpo", [1, 2, 3], [0.2200, 0.2210, 0.2205])], style=STYLE, title="t",
                                 x_title="step", y_title="seconds")
    assert list(flat.layout.yaxis.range) == pytest.approx([0, 0.2431])
    zero = plotting.lines_figure([plotting.Curve("a", "grpo", [1, 2], [0.0, 0.0])], style=STYLE, title="t", x_title="step",
                                 y_title="y")
    assert list(zero.layout.yaxis.range) == [0, 1]
    varying = plotting.lines_figure([plotting.Curve("a", "grpo", [1, 2], [0.2, 0.4])], style=STYLE, title="t", x_title="step",
                                    y_title="y")
    assert varying.layout.yaxis.range is None and varying.layout.yaxis.rangemode is None
    fixed = run_charts.reward_figure([1, 2], {"reward/mean": [0.5, 0.5]}, "grpo", style=STYLE)
    assert list(fixed.layout.yaxis.range) == [0, 1.02]  # a chart with its own range keeps it
    band = compare_charts.band_figure([compare_charts.Band("g", "grpo", [1, 2], [256.0, 256.0], [256.0, 256.0], [256.0, 256.0], [2, 2])],
                                      style=STYLE, title="t", x_title="step", y_title="rollouts", counts=True)
    assert list(band.layout.yaxis.range) == pytest.approx([0, 281.6]) and band.layout.yaxis.tickformat == ",d"


def test_a_runs_second_series_stays_visible_where_it_equals_the_first():
    # GRPO trains every rollout it generates: a same-coloured dashed line under the solid one vanished
    fig = run_charts.rollouts_figure([1, 2], {"rollout/generated": [256, 256], "rollout/trained": [256, 256]}, "grpo", style=STYLE)
    generated, trained = fig.data
    assert generated.line.width > 3 * trained.line.width and generated.line.color == "rgba(76,120,168,0.3)"
    assert trained.line.color == COLORS["grpo"]
    zero = run_charts.zero_acc_figure([1, 2], {"zero_acc/after_explore": [0.3, 0.2], "zero_acc/after_rescue": [0.3, 0.2]}, "grpo",
                                      style=STYLE)
    assert zero.data[0].name == "after explore" and zero.data[0].line.width == plotting.UNDERLAY["width"]


def test_health_figure_drops_the_kl_panel_when_kl_is_off():
    s = {"train/grad_norm": [1.0, 2.0], "train/entropy": [1.0, 0.9], "train/kl": [0.0, 0.0]}
    on = run_charts.health_figure([1, 2], s, "aero", style=STYLE)
    assert [a.text for a in on.layout.annotations] == ["grad norm", "entropy (nats/token)", "KL to reference"]
    off = run_charts.health_figure([1, 2], s, "aero", style=STYLE, kl=False)
    assert [a.text for a in off.layout.annotations] == ["grad norm", "entropy (nats/token)"] and len(off.data) == 2
    assert "KL off (kl_coef = 0)" in off.layout.title.text


def test_zero_acc_compare_draws_explore_only_when_it_differs():
    fig = compare_charts.zero_acc_compare_figure([("#1 GRPO", "grpo", [1, 2], [0.5, 0.4], [0.5, 0.4]),
                                                  ("#2 AERO", "aero", [1, 2], [0.5, 0.4], [0.3, 0.2])], style=STYLE)
    names = [t.name for t in fig.data]
    assert names == ["#1 GRPO (mean 45.0%)", "#2 AERO (mean 25.0%)", "#2 AERO: after explore"]
    assert fig.data[1].line.color == fig.data[2].line.color == COLORS["aero"] and fig.data[2].line.dash == "dot"
    assert fig.layout.yaxis.tickformat == ".0%" and fig.layout.yaxis.hoverformat == ".1%"  # hovers like the legend


def test_coinciding_curves_of_two_methods_differ_by_dash():
    same = [0.5, 0.4]  # GRPO and DAPO of one seed: the same ratios, the later line would hide the earlier
    fig = compare_charts.zero_acc_compare_figure([("#1 GRPO s0", "grpo", [1, 2], same, same), ("#2 DAPO s0", "dapo", [1, 2], same, same)],
                                                 style=STYLE)
    assert [t.line.dash for t in fig.data] == ["solid", "dash"]


def test_run_figures_name_their_units():
    steps = [1, 2]
    s = {"time/rollout_s": [1.0, 1.0], "time/train_s": [2.0, 3.0], "flops/rollout": [1e9, 1e9], "flops/train": [2e9, 2e9]}
    assert run_charts.time_split_figure(steps, s).layout.yaxis.title.text == "seconds"
    fl = run_charts.flops_figure(steps, s)
    assert fl.layout.yaxis.title.text == "FLOPs" and [t.name for t in fl.data] == ["rollout", "train"]
    assert run_charts.reward_figure(steps, {"reward/mean": [0.1, 0.2]}, "grpo", style=STYLE).data[0].line.color == COLORS["grpo"]


def test_table_figure_bolds_flagged_cells():
    fig = plotting.table_figure(["a", "b"], [["1", "2"], ["3", "4"]], [[False, True], [True, False]])
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
    # best: lower cost, higher accuracy; a column where every run is equal is all tied best: all bold
    assert t.bold == [[False, False, False, False, False, True, True],
                      [False, True, True, True, True, True, False]]
    passes = t.part(("Pass@",))
    assert passes.columns == ["run", "Pass@8 L1", "Pass@8 total"] and passes.bold == [[False, True, True], [False, True, False]]
    assert passes.rows[1] == ["#2 AERO", "0.700<br>[0.60, 0.80]", "0.600 (0.86×)<br>[0.50, 0.70]"]
    f = t.frame.set_index("run_id")
    assert f.loc[2, "avg_at_k:overall:ratio"] == pytest.approx(1.25) and f.loc[2, "avg_at_k:overall:ci_lo"] == pytest.approx(0.4)
    assert f.loc[1, "baseline"] and not f.loc[2, "baseline"]


def test_best_bolds_every_tied_best_in_every_column():
    assert tables.best_cells([0.5, 0.7, 0.7, None], higher=True) == [False, True, True, False]
    assert tables.best_cells([2.0, 1.0, 1.0], higher=False) == [False, True, True]
    # one rule: a column where every run ties is bold throughout, like a column where two of three tie
    assert tables.best_cells([0.0, 0.0], higher=True) == [True, True] and tables.best_cells([0.3], higher=True) == [False]
    # a tie is what the cells show: 0.5004 and 0.4996 both read 0.500
    assert tables.best_cells([0.5004, 0.4996, 0.3], higher=True, shown=acc_text) == [True, True, False]
    assert tables.best_cells([0.5004, 0.4996, 0.3], higher=True) == [True, False, False]


def test_benchmark_table_bolds_ties_as_shown_in_every_column():
    entries = [{"run_id": i, "label": f"#{i}", "method": "grpo", "time_s": t, "flops": 4e9,
                "evals": {"L1": ev(30, a, 0.7), "overall": ev(30, a, 0.7, bench="overall")}}
               for i, t, a in ((1, 2.0001, 0.4004), (2, 2.0, 0.3996), (3, 3.0, 0.2))]
    t = tables.benchmark_table(entries, baseline_id=1)
    assert t.columns == ["run", "time / step", "FLOPs / step", "Avg@8 L1", "Avg@8 total", "Pass@8 L1", "Pass@8 total"]
    # time: 2 s and 2 s tie; FLOPs and Pass@8: all equal, all bold; Avg@8: 0.400 and 0.400 tie
    assert t.bold == [[False, True, True, True, True, True, True], [False, True, True, True, True, True, True],
                      [False, False, True, False, False, True, True]]


def test_benchmark_table_without_evals_keeps_cost_columns():
    t = tables.benchmark_table([{"run_id": 5, "label": "#5", "method": "dapo", "time_s": None, "flops": 1e9, "evals": {}}], 5)
    assert t.columns == ["run", "time / step", "FLOPs / step"] and t.rows == [["#5 (baseline)", "–", "1 GFLOP (1.00×)"]]


def svg_of(data_url: str) -> str:
    """The SVG inside a base64 data URL (the Runs page's progress cells)."""
    import base64

    head, _, body = data_url.partition(",")
    assert head == "data:image/svg+xml;base64"
    return base64.b64decode(body).decode()


def test_runs_frame_and_last_values():
    run = {"id": 3, "name": "x", "method": "aero-s1", "status": "failed", "progress": 0.5, "current_step": 5, "total_steps": 10,
           "tags": ["a", "b"], "sweep_id": None, "created_at": "2026-11-30T01:02:03", "error": "Traceback\n  ...\nValueError: bad\n"}
    payload = {"steps": [3, 4, 5], "series": {"reward/mean": [0.1, 0.2, None], "time/step_s": [3.0, 1.0, 2.0],
                                              "zero_acc/after_rescue": [0.5, 0.25, 0.125]}}
    last = tables.last_values(payload)
    assert last == {"reward/mean": 0.2, "time/step_s": 2.0, "zero_acc/after_rescue": 0.125}
    summary = tables.run_summary(payload)
    assert summary[tables.STEP_TIME_MEAN] == pytest.approx(2.0) and summary["time/step_s"] == 2.0  # mean of 3, 1, 2; last 2
    row = tables.runs_frame([run], {3: summary}, STYLE).iloc[0]
    assert (row["method"], row["step"], row["reward"], row["tags"], row["message"], row["open"]) == (
        "AERO S1 only", "5/10", 0.2, "a, b", "ValueError: bad", "./run?run=3")
    assert row["created"] == "11-30 01:02"
    assert row["mean step time (s)"] == pytest.approx(2.0) and row["zero-acc ratio"] == pytest.approx(12.5)  # percent
    svg = svg_of(row["progress"])  # a bar in AERO S1's colour, half full (80 px wide), with its percentage
    assert f"fill='{COLORS['aero-s1']}'" in svg and "width='40.0'" in svg and ">50.0%</text>" in svg
    assert (row["status"], row["waits for"]) == ("failed", "")


def test_a_waiting_runs_status_cell_says_for_how_long_and_what_it_waits_for():
    since = (datetime.now(UTC) - timedelta(hours=2, minutes=5, seconds=30)).isoformat().replace("+00:00", "Z")
    run = {"id": 4, "name": "w", "method": "aero", "status": "running", "state": "waiting", "progress": 0.0,
           "current_step": 0, "total_steps": 10, "tags": [], "sweep_id": None, "created_at": "2026-11-30T01:02:03",
           "waiting_for": "2 GPU(s): 0 of the Ray cluster's 4 free", "waiting_since": since}
    row = tables.runs_frame([run, {**run, "id": 5, "state": "running", "waiting_for": None, "waiting_since": None,
                                   "cancel_requested": True}], {}, STYLE).set_index("id")
    assert row.loc[4, "status"] == "waiting · 2h 05m" and row.loc[4, "waits for"] == run["waiting_for"]
    assert (row.loc[5, "status"], row.loc[5, "waits for"]) == ("running (cancelling)", "")
    assert tables.run_label(run, STYLE) == "#4 w (AERO, waiting)"


def test_progress_bars_take_their_methods_colour():
    bars = {m: svg_of(tables.progress_svg(26 / 30, c)) for m, c in COLORS.items()}
    for m, svg in bars.items():
        assert f"fill='{COLORS[m]}'" in svg and ">86.7%</text>" in svg
    assert "#FF4B4B" not in "".join(bars.values()).upper()  # Streamlit's theme red, what every bar used to be


def test_latest_runs_put_running_runs_first():
    runs = [{"id": i, "status": s} for i, s in ((9, "queued"), (8, "queued"), (7, "queued"), (6, "queued"), (5, "queued"),
                                                (4, "succeeded"), (3, "running"), (2, "running"), (1, "failed"))]
    assert [r["id"] for r in tables.latest_runs(runs)] == [3, 2, 9, 8, 7]
    many = [{"id": i, "status": "running"} for i in range(7, 0, -1)] + [{"id": 0, "status": "queued"}]
    assert [r["id"] for r in tables.latest_runs(many)] == [7, 6, 5, 4, 3, 2, 1]  # never hide a running run
    assert [r["id"] for r in tables.latest_runs(many, max_running=3)] == [7, 6, 5, 0]  # the Overview says how many more


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


# ---------------------------------------------------------------- seed groups (fixture payloads shaped as docs/api.md)


def stat(mean, lo=None, hi=None, n=3):
    return {"mean": mean, "lo": lo, "hi": hi, "n": n, "values": []}


def rstat(mean, lo=None, hi=None, n=3):
    return {"mean": mean, "lo": lo, "hi": hi, "n": n, "pairs": []}


GROUPS = {
    "baseline": "aaaaaaaaaa", "alpha": 0.05,
    "groups": [
        {"key": "aaaaaaaaaa", "label": "grpo", "method": "grpo", "run_ids": [1, 2, 3], "seeds": [0, 1, 2], "steps": stat(30),
         "mean": {"time/step_s": stat(2.0, 1.9, 2.1), "flops/total": stat(4e9, 3.9e9, 4.1e9),
                  "rollout/trained": stat(256.0, 256.0, 256.0), "zero_acc/after_rescue": stat(0.3, 0.28, 0.32),
                  "waste/flops_frac": stat(0.25, 0.2, 0.3)},
         "total": {}, "evals": {"L1": {"k": 8, "n": 8, "problems": 4, "avg_at_k": stat(0.40, 0.38, 0.42), "pass_at_k": stat(0.7)},
                               "L2": {"k": 8, "n": 8, "problems": 4, "avg_at_k": stat(0.20), "pass_at_k": stat(0.5)},
                               "overall": {"k": 8, "n": 8, "problems": 8, "avg_at_k": stat(0.30, 0.29, 0.31), "pass_at_k": stat(0.6)}},
         "ratios": {"mean": {"time/step_s": rstat(1.0, 1.0, 1.0)}, "total": {}, "evals": {}}},
        {"key": "bbbbbbbbbb", "label": "aero", "method": "aero", "run_ids": [4, 5], "seeds": [0, 1], "steps": stat(30, n=2),
         "mean": {"time/step_s": stat(1.04, 0.98, 1.10, 2), "flops/total": stat(2e9, None, None, 2),
                  "rollout/trained": stat(70.0, 64.0, 76.0, 2), "zero_acc/after_rescue": stat(0.18, 0.16, 0.2, 2),
                  "waste/flops_frac": stat(0.05, 0.04, 0.06, 2)},
         "total": {}, "evals": {"L1": {"k": 8, "n": 8, "problems": 4, "avg_at_k": stat(0.46, n=2), "pass_at_k": stat(0.75, n=2)},
                               "L2": {"k": 8, "n": 8, "problems": 4, "avg_at_k": stat(0.18, n=2), "pass_at_k": stat(0.5, n=2)},
                               "overall": {"k": 8, "n": 8, "problems": 8, "avg_at_k": stat(0.32, 0.30, 0.34, 2),
                                           "pass_at_k": stat(0.625, n=2)}},
         "ratios": {"mean": {"time/step_s": rstat(0.52, 0.48, 0.56, 2), "flops/total": rstat(0.5, 0.5, 0.5, 2),
                             "rollout/trained": rstat(0.2734, None, None, 1), "zero_acc/after_rescue": rstat(0.6, 0.5, 0.7, 2),
                             "waste/flops_frac": rstat(0.2, 0.15, 0.25, 2)},
                    "total": {}, "evals": {"overall": {"avg_at_k": rstat(1.0667, 1.0, 1.13, 2), "pass_at_k": rstat(1.04, n=2)}}}},
    ],
    "significance": {"overall": [
        {"group": "bbbbbbbbbb", "baseline": "aaaaaaaaaa", "metric": "avg_at_k", "k": 8, "diff": 0.02, "ci": [0.004, 0.036],
         "p_value": 0.0123, "problems": 8, "seeds": [2, 3], "test": "paired sign-flip permutation over problems"},
        {"group": "bbbbbbbbbb", "baseline": "aaaaaaaaaa", "metric": "pass_at_k", "k": 8, "diff": 0.025, "ci": [-0.01, 0.06],
         "p_value": 0.0004, "problems": 8, "seeds": [2, 3], "test": "paired sign-flip permutation over problems"}]},
}


def test_stat_texts_take_a_formatter():
    # the formats themselves: tests/common/test_fmt.py; the tables pass functions of the number too
    assert stat_text(stat(1.5, 1.0, 2.0), lambda v: si(v, "s")) == "1.5 s ± 0.5 s"
    assert stat_text(stat(0.18, 0.16, 0.2), pct) == "18.0% ± 2.0%"


def test_group_summary_table_strings_bold_and_csv():
    t = tables.group_summary_table(GROUPS["groups"], GROUPS["baseline"])
    assert t.columns == ["group", "seeds", "time / step", "FLOPs / step", "wasted FLOPs", "trained rollouts / step",
                         "zero-acc after rescue", "Avg@8 total", "Pass@8 total", "seed pairs"]
    base, aero = t.rows
    # baseline: mean ± half-CI only, no ratio, no pairs
    assert base == ["grpo (baseline)", "3 (0, 1, 2)", "2 ± 0.1 s", "4 ± 0.1 GFLOP", "25.0% ± 5.0%", "256 ± 0",
                    "30.0% ± 2.0%", "0.300 ± 0.010", "0.600", "—"]
    assert aero[1] == "2 (0, 1)"
    assert aero[2] == "1.04 ± 0.06 s<br>0.52× [0.48, 0.56]"  # half-CI = (1.10 - 0.98) / 2
    assert aero[3] == "2 GFLOP<br>0.50× [0.50, 0.50]"  # one CI missing: the mean alone
    assert aero[4] == "5.0% ± 1.0%<br>0.20× [0.15, 0.25]"
    assert aero[5] == "70 ± 6<br>0.27×" and aero[6] == "18.0% ± 2.0%<br>0.60× [0.50, 0.70]"
    assert aero[7] == "0.320 ± 0.020<br>1.07× [1.00, 1.13]" and aero[8] == "0.625<br>1.04×"
    assert aero[9] == "2"  # the most seed pairs behind any ratio of the row
    # lower cost and zero-accuracy, higher accuracy win
    assert t.bold == [[False, False, False, False, False, False, False, False, False, False],
                      [False, False, True, True, True, True, True, True, True, False]]
    f = t.frame.set_index("label")
    assert f.loc["aero", "time / step:ratio_lo"] == pytest.approx(0.48) and f.loc["aero", "time / step:hi"] == pytest.approx(1.10)
    assert f.loc["grpo", "baseline"] and pd_isna(f.loc["grpo", "seed pairs"]) and f.loc["aero", "seeds"] == 2


def pd_isna(v):
    import pandas as pd

    return bool(pd.isna(v))


def test_group_summary_table_without_evals_drops_accuracy_columns():
    groups = [{**g, "evals": {}} for g in GROUPS["groups"]]
    t = tables.group_summary_table(groups, "bbbbbbbbbb")
    assert "Avg@k total" not in t.columns and "Avg@8 total" not in t.columns and t.columns[-1] == "seed pairs"
    assert t.rows[1][0] == "aero (baseline)" and t.rows[0][-1] == "3"  # grpo's only ratio (time) has 3 pairs


def test_group_benchmark_table_total_and_p_value():
    t = tables.group_benchmark_table(GROUPS["groups"], GROUPS["significance"], GROUPS["baseline"])
    assert t.columns == ["group", "Avg@8 L1", "Avg@8 L2", "Avg@8 Total (P-value)"]
    assert t.rows == [["grpo (baseline)", "0.400", "0.200", "0.300 (—)"], ["aero", "0.460", "0.180", "0.320 (p=0.012)"]]
    assert t.bold == [[False, False, True, False], [False, True, False, True]]
    p = tables.group_benchmark_table(GROUPS["groups"], GROUPS["significance"], GROUPS["baseline"], metric="pass_at_k")
    assert p.columns[-1] == "Pass@8 Total (P-value)" and p.rows[1][-1] == "0.625 (p<0.001)" and p.rows[0][-1] == "0.600 (—)"
    assert p.bold == [[False, False, True, False], [False, True, True, True]]  # L2: both 0.500, both tied best
    f = t.frame.set_index("label")
    assert f.loc["aero", "avg_at_k:p_value"] == pytest.approx(0.0123) and f.loc["aero", "avg_at_k:diff_lo"] == pytest.approx(0.004)
    assert p.frame.set_index("label").loc["aero", "pass_at_k:p_value"] == pytest.approx(0.0004)
    assert f.loc["aero", "avg_at_k:L1"] == pytest.approx(0.46) and f.loc["grpo", "avg_at_k:overall:hi"] == pytest.approx(0.31)


def test_group_benchmark_table_without_a_test_shows_the_value_alone():
    t = tables.group_benchmark_table(GROUPS["groups"], {}, GROUPS["baseline"])
    assert t.rows[1][-1] == "0.320"


def band(label, method, x, mean, lo, hi, n, dash="solid"):
    return compare_charts.Band(label, method, x, mean, lo, hi, n, dash)


def test_band_polygon_closes_each_stretch_with_a_ci():
    xs, ys = compare_charts.band_polygon([0, 1, 2, 3, 4], [None, 0.1, 0.2, None, 0.4], [None, 0.3, 0.4, None, 0.6])
    assert xs == [1, 2, 2, 1, None, 4, 4] and ys == [0.3, 0.4, 0.2, 0.1, None, 0.6, 0.4]
    assert compare_charts.band_polygon([0, 1], [None, None], [None, None]) == ([], [])


def test_band_figure_shades_each_group_in_its_method_colour():
    bands = [band("grpo", "grpo", [0, 1, 2], [0.1, 0.2, 0.3], [None, 0.15, 0.2], [None, 0.25, 0.4], [1, 2, 2]),
             band("aero", "aero", [0, 1, 2], [0.2, 0.3, 0.4], [0.1, 0.2, 0.3], [0.3, 0.4, 0.5], [3, 3, 3]),
             band("aero · aero.n_explore=4", "aero", [0, 1], [0.2, 0.3], [None, None], [None, None], [1, 1], dash="dash")]
    fig = compare_charts.band_figure(bands, style=STYLE, title="reward/mean", x_title="step", y_title="reward")
    fills = [t for t in fig.data if t.fill == "toself"]
    lines = [t for t in fig.data if t.fill != "toself"]
    assert [t.name for t in lines] == ["grpo", "aero", "aero · aero.n_explore=4"]  # legend by group label
    assert len(fills) == 2 and all(not t.showlegend and t.hoverinfo == "skip" for t in fills)  # no band without a CI
    assert fills[0].fillcolor == "rgba(76,120,168,0.18)" and fills[1].fillcolor == "rgba(228,87,86,0.18)"
    assert list(fills[0].x) == [1, 2, 2, 1] and list(fills[0].y) == [0.25, 0.4, 0.2, 0.15]
    assert lines[1].line.color == lines[2].line.color == COLORS["aero"] and lines[2].line.dash == "dash"
    assert list(lines[0].customdata[1]) == ["[0.15, 0.25]", 2] and list(lines[0].customdata[0]) == ["–", 1]
    assert "95% CI %{customdata[0]}" in lines[0].hovertemplate and "n=%{customdata[1]} seeds" in lines[0].hovertemplate
    assert "95% CI across seeds" in fig.layout.title.text and fig.layout.xaxis.dtick == 1


def test_band_figure_on_a_cumulative_x_axis():
    b = band("g", "dapo", [1e9, 2e9, 3e9], [1.0, 2.0, 3.0], [0.5, 1.5, 2.5], [1.5, 2.5, 3.5], [2, 2, 2])
    fig = compare_charts.band_figure([b], style=STYLE, title="t", x_title="cumulative FLOPs", y_title="y", level=90)
    assert list(fig.data[0].x) == [1e9, 2e9, 3e9, 3e9, 2e9, 1e9] and fig.layout.xaxis.dtick is None
    assert "90% CI" in fig.data[1].hovertemplate and fig.data[0].fillcolor.startswith("rgba(245,133,24,")


def test_band_stops_at_the_metrics_range_but_hover_keeps_the_interval():
    b = band("g", "grpo", [1, 2], [0.1, 0.9], [-0.5, 0.4], [0.7, 1.6], [2, 2])
    fig = compare_charts.band_figure([b], style=STYLE, title="t", x_title="step", y_title="y", clip=(0.0, 1.0))
    assert list(fig.data[0].y) == [0.7, 1.0, 0.4, 0.0]
    assert list(fig.data[1].customdata[1]) == ["[0.4, 1.6]", 2]
    assert list(compare_charts.band_figure([b], style=STYLE, title="t", x_title="step", y_title="y").data[0].y) == [0.7, 1.6, 0.4, -0.5]


def test_zero_acc_band_figure():
    rescue = band("aero", "aero", [0, 1], [0.2, 0.1], [0.15, 0.05], [0.25, 0.15], [2, 2])
    same = band("grpo", "grpo", [0, 1], [0.4, 0.3], [0.35, 0.25], [0.45, 0.35], [2, 2])
    explore = band("x", "aero", [0, 1], [0.4, 0.3], [None, None], [None, None], [2, 2])
    fig = compare_charts.zero_acc_band_figure([(rescue, explore), (same, band("x", "grpo", [0, 1], [0.4, 0.3], [0.3, 0.2], [0.5, 0.4], [2, 2]))],
                                              style=STYLE)
    names = [t.name for t in fig.data if t.fill != "toself"]
    assert names == ["aero (mean 15.0%)", "aero: after explore", "grpo (mean 35.0%)"]  # explore drawn only when it differs
    assert sum(t.fill == "toself" for t in fig.data) == 2 and fig.layout.yaxis.tickformat == ".0%"


def test_dash_by_method():
    # runs of one method differ by dash, and so do the first runs of different methods
    assert STYLE.dash_by_method(["grpo", "aero", "aero", "grpo", "aero"]) == ["solid", "longdash", "longdashdot", "dash", "solid"]
    firsts = STYLE.dash_by_method(["grpo", "dapo", "aero", "aero-s1", "aero-s1s2"])
    assert len(set(firsts)) == len(firsts) == 5 and "dot" not in firsts  # dotted = after exploration in Fig. 9
    assert "dot" not in STYLE.dash_by_method(list(STYLE.names))
    seeds = STYLE.dash_by_method(["grpo", "dapo", "grpo", "dapo"])  # seed 0, seed 0, seed 1, seed 1
    assert seeds[0] != seeds[1] and seeds[2] != seeds[3] and seeds[0] != seeds[2]


# ---------------------------------------------------------------- the headline: accuracy vs compute, compute to reach


def test_headline_figure_draws_targets_and_markers():
    b = band("grpo", "grpo", [0.0, 1e9, 2e9], [0.3, 0.4, 0.5], [0.25, 0.35, 0.45], [0.35, 0.45, 0.55], [2, 2, 2])
    fig = compare_charts.headline_figure([b], style=STYLE, title="Held-out Avg@8 vs training FLOPs", x_title="cumulative training FLOPs",
                                 y_title="Avg@8", targets=[(0.4, "50% of GRPO's gain")], x_tickformat="~s")
    line = next(t for t in fig.data if t.fill != "toself")
    assert line.mode == "lines+markers" and "95% CI across seeds" in fig.layout.title.text
    assert fig.layout.shapes[0].y0 == 0.4 and fig.layout.annotations[0].text == "50% of GRPO's gain"
    one = band("#1 GRPO s0", "grpo", [0.0, 1.0], [0.3, 0.4], [None, None], [None, None], [1, 1])
    fig = compare_charts.headline_figure([one], style=STYLE, title="t", x_title="x", y_title="y", seeds=False)
    assert "CI" not in fig.layout.title.text and "CI" not in fig.data[0].hovertemplate and len(fig.data) == 1


REACH = {
    "baseline": "g", "window": 3, "fractions": [0.5, 1.0],
    "targets": [{"fraction": 0.5, "accuracy": stat(0.4)}, {"fraction": 1.0, "accuracy": stat(0.5)}],
    "groups": [
        {"key": "g", "label": "grpo", "method": "grpo", "reason": None, "targets": [
            {"fraction": 0.5, "reached": 2, "of": 2, "step": stat(30.0), "flops": stat(6e10, 5e10, 7e10), "seconds": stat(6.0),
             "ratio": {"flops": rstat(1.0), "seconds": rstat(1.0)}},
            {"fraction": 1.0, "reached": 2, "of": 2, "step": stat(60.0), "flops": stat(1.2e11), "seconds": stat(12.0),
             "ratio": {"flops": rstat(1.0), "seconds": rstat(1.0)}}]},
        {"key": "a", "label": "aero", "method": "aero", "reason": None, "targets": [
            {"fraction": 0.5, "reached": 1, "of": 2, "step": stat(20.0, n=1), "flops": stat(2e10, n=1), "seconds": stat(2.0, n=1),
             "ratio": {"flops": rstat(1 / 3, n=1), "seconds": rstat(0.35, n=1)}},
            {"fraction": 1.0, "reached": 0, "of": 2, "step": stat(None), "flops": stat(None), "seconds": stat(None),
             "ratio": {"flops": rstat(None, n=0), "seconds": rstat(None, n=0)}}]},
        {"key": "d", "label": "dapo", "method": "dapo", "reason": "no run shares a seed with the baseline group", "targets": []},
    ],
}


def test_reach_table_cells_not_reached_and_bold():
    t = reach_tables.reach_table(reach_tables.group_reach_entries(REACH), REACH, "GRPO", k=8)
    assert t.columns == ["method", "50% of GRPO's gain<br>(Avg@8 ≥ 0.400)", "100% of GRPO's gain<br>(Avg@8 ≥ 0.500)"]
    grpo, aero, dapo = t.rows
    assert grpo == ["grpo (baseline)", "60 ± 10 GFLOP<br>6 s", "120 GFLOP<br>12 s"]  # no ratio to itself
    assert aero[1] == "20 GFLOP<br>2 s<br>0.33× FLOPs<br>0.35× time<br>not reached (1/2 seeds)"
    assert aero[2] == "not reached (2/2 seeds)"
    assert dapo == ["dapo", "no run shares a seed with the baseline group", "–"]
    # least FLOPs among those that reached; at 100% only GRPO did: nothing to single out
    assert t.bold == [[False, False, False], [False, True, False], [False, False, False]]
    f = t.frame.set_index("label")
    assert f.loc["aero", "50%:reached"] == 1 and f.loc["aero", "50%:of"] == 2
    assert f.loc["aero", "50%:ratio_flops"] == pytest.approx(1 / 3) and f.loc["grpo", "50%:flops_lo"] == 5e10


def test_run_reach_entries_are_groups_of_one():
    reach = {"baseline_run_id": 1, "targets": [{"fraction": 0.5, "accuracy": 0.4}], "runs": [
        {"run_id": 1, "targets": [{"fraction": 0.5, "accuracy": 0.4, "reached": True, "step": 30, "flops": 60.0, "seconds": 6.0,
                                   "ratio": {"flops": 1.0, "seconds": 1.0}}]},
        {"run_id": 2, "targets": [{"fraction": 0.5, "accuracy": 0.4, "reached": False, "step": None, "flops": None,
                                   "seconds": None, "ratio": {"flops": None, "seconds": None}}]}]}
    entries = reach_tables.run_reach_entries(reach, {1: "#1 GRPO s0", 2: "#2 DAPO s0"}, {1: "grpo", 2: "dapo"})
    assert entries[0]["baseline"] and entries[1]["targets"][0]["reached"] == 0 and entries[1]["targets"][0]["of"] == 1
    t = reach_tables.reach_table(entries, reach, "GRPO", seeds=False)
    assert t.columns[1] == "50% of GRPO's gain<br>(Avg@k ≥ 0.400)"
    assert t.rows == [["#1 GRPO s0 (baseline)", "60 FLOP<br>6 s"], ["#2 DAPO s0", "not reached"]]


def test_table_figure_is_as_tall_as_its_rows():
    two = plotting.table_figure(["a"], [["x"]], [[False]])
    tall = plotting.table_figure(["a<br>b"], [["x<br>y<br>z"], ["x"]], [[False], [False]])
    assert two.layout.height == 45 + 48 and tall.layout.height == 45 + 18 + (12 + 18 * 3) + 48


# ---------------------------------------------------------------- the arena's leaderboard


def _stat(mean):
    return {"mean": mean, "lo": mean - 0.01, "hi": mean + 0.01, "n": 2}


def _group(key, final, flops, seeds_reach, waste=0.3):
    return {"key": key, "label": key, "method": key, "run_ids": [1, 2], "seeds": [0, 1],
            "mean": {"flops/total": _stat(flops), "time/step_s": _stat(2.0), "rollout/generated": _stat(64.0),
                     "rollout/trained": _stat(32.0), "zero_acc/after_rescue": _stat(0.25),
                     "waste/flops_frac": _stat(waste)},
            "evals": {"overall": {"k": 8, "avg_at_k": _stat(final)}}, "_reach": seeds_reach}


def test_arena_table_sorts_by_accuracy_keeps_not_reached_and_marks_the_baseline():
    seeds = lambda *fl: [{"seed": s, "reached": f is not None, "flops": f, "seconds": None if f is None else 10.0}  # noqa: E731
                         for s, f in enumerate(fl)]
    groups = [_group("grpo", 0.40, 2e9, seeds(4e9, 6e9)), _group("speed", 0.45, 1e9, seeds(2e9, None), waste=0.1)]
    body = {"baseline": "grpo", "alpha": 0.05, "groups": groups,
            "significance": {"overall": [{"group": "speed", "metric": "avg_at_k", "diff": 0.05, "ci": [0.01, 0.09],
                                          "p_value": 0.0123}]},
            "reach": {"groups": [{"key": g["key"], "targets": [{"fraction": f, "seeds": g["_reach"]} for f in (0.5, 0.75, 0.9, 1.0)]}
                                 for g in groups]}}
    t = reach_tables.arena_table(body)
    assert [r[0] for r in t.rows] == ["speed", "grpo (baseline)"]  # best final Avg@8 first
    assert t.columns[2] == "final Avg@8" and t.rows[0][2] == "0.450 ± 0.010"
    assert t.rows[0][3] == "+0.050 [0.010, 0.090]<br>p=0.012" and t.rows[1][3] == "—"
    half = t.columns.index("to 50% of the baseline's gain (per seed)")
    assert t.rows[0][half] == "s0 2 GFLOP · 10 s<br>s1 not reached"
    assert t.bold[0][2] and not t.bold[1][2] and t.bold[0][4]  # best accuracy, least FLOPs per step
    wasted = t.columns.index("wasted FLOPs")
    assert t.rows[0][wasted].startswith("10.0%") and t.bold[0][wasted] and not t.bold[1][wasted]
    rec = t.frame.set_index("group")
    assert rec.loc["speed", "p_value"] == 0.0123 and rec.loc["speed", "50%:seed0:flops"] == 2e9
    assert rec.loc["speed", "waste/flops_frac"] == pytest.approx(0.1)
    assert pd.isna(rec.loc["speed", "50%:seed1:flops"])  # not reached: empty in the CSV, not dropped
    fig = arena_figure(reach_tables.arena_points(body), style=STYLE, k=8)
    assert [t.name for t in fig.data] == ["grpo", "speed"] and fig.data[1].marker.color == STYLE.color("speed") == "#BCBD22"
    assert fig.data[1].x == (1e9,) and fig.data[1].y == (0.45,) and fig.data[1].error_y.array == (pytest.approx(0.01),)


def test_reach_cells_show_rollouts_to_target_where_the_runs_logged_them():
    st = lambda m: {"mean": m, "lo": m * 0.9, "hi": m * 1.1, "n": 3}  # noqa: E731
    cell = reach_cell({"of": 3, "reached": 3, "flops": st(2e9), "seconds": st(10.0), "rollouts": st(2100.0),
                       "ratio": {"rollouts": {"mean": 0.5, "lo": 0.4, "hi": 0.6, "n": 3}}}, False)
    assert cell.split("<br>")[2:] == ["2.1 ± 0.21 k rollouts", "0.50× [0.40, 0.60] rollouts"]
    older = reach_cell({"of": 1, "reached": 1, "flops": st(2e9), "seconds": st(10.0), "ratio": {}}, False)
    assert "rollouts" not in older  # a store from before the rollouts axis: FLOPs and seconds only
    text = reach_tables.seed_reach_text({"seeds": [{"seed": 0, "reached": True, "flops": 2e9, "seconds": 10.0, "rollouts": 2100},
                                             {"seed": 1, "reached": False, "flops": None, "seconds": None, "rollouts": None}]})
    assert text == "s0 2 GFLOP · 10 s · 2.1 k rollouts<br>s1 not reached"


def test_the_rollouts_table_shows_a_long_prompts_end():
    from dashboard.rollouts_view import PROMPT_TAIL, prompt_tail, rollout_frame
    from tests.dashboard.step_details import CHAT_PROMPT, chat_detail

    shown = prompt_tail(CHAT_PROMPT)
    assert shown.startswith("…") and len(shown) == PROMPT_TAIL + 1
    assert shown.endswith("Answer with just the expression. assistant")  # the question, not the system prompt
    assert prompt_tail("37+85=") == "37+85="  # a char preset's prompt is shown whole
    frame = rollout_frame(chat_detail(1)["rollouts"])
    assert set(frame["prompt"]) == {shown}
    rows = chat_detail(1)["rollouts"]
    assert rollout_frame([{**rows[0], "version": 3}, rows[1]])["version"].tolist()[0] == 3  # blank before rows carried it
