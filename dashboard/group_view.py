"""The Compare page's seed-group view ("Aggregate seeds"): runs whose configs differ only in the
seed form a group (the API decides, GET /compare/groups); curves become a mean line with a
Student-t band across seeds, Fig. 9 the same, and the tables give mean ± half-CI, paired
ratios to a baseline group and a significance test per benchmark.

Streamlit sections only; the figures are built by compare_charts.py and arena_chart.py, the
tables by tables.py and reach_tables.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import streamlit as st

import common.metric_keys as mk
from dashboard import compare_charts, reach_tables, tables, ui
from dashboard.arena_chart import arena_figure
from dashboard.client import ApiError
from dashboard.compare_charts import Band
from dashboard.method_style import MethodStyle
from dashboard.plotting import subtitled, table_figure
from dashboard.run_charts import REWARD_NOTES

DOC = Path(__file__).resolve().parent.parent / "docs" / "comparisons.md"
GRID_POINTS = 200  # per group curve, on the API's common grid
ZERO_KEYS = (mk.ZERO_ACC_AFTER_RESCUE, mk.ZERO_ACC_AFTER_EXPLORE)
EVAL_KEY = mk.EVAL_HEADLINE  # held-out Avg@k pooled over every benchmark (GET /compare/curves)
FRACTIONS = frozenset({EVAL_KEY, mk.REWARD_MEAN, mk.REWARD_TRAINED_MEAN, mk.ZERO_ACC_AFTER_RESCUE, mk.ALL_CORRECT_RATIO,
                       mk.ADV_ZERO_FRAC})  # 0..1
COUNTS = frozenset({mk.ROLLOUTS_TRAINED, mk.TOKENS_TRAINED})  # y counts things: from 0, whole-number ticks
HEADLINE_AXES = {"flops": ("training FLOPs", "cumulative training FLOPs (rollout + train)", "~s"),
                 "time": ("training time", "training wall time (s, evaluation excluded)", None)}  # axis -> (title, x title, ticks)


def level(alpha: float | None) -> int:
    """0.05 -> 95 (the CI level in captions and hovers)."""
    return round(100 * (1 - (alpha if alpha is not None else 0.05)))


def seed_groups(url: str, token: str | None, ids: tuple[int, ...], versions: tuple, baseline: int | None = None) -> dict | None:
    """The chosen runs' seed groups, or None when the API cannot group them (an older API
    without the endpoint, or a refusal): the page then keeps its per-run view."""
    try:
        return ui.compare_groups(url, token, ids, baseline, versions)
    except ApiError as e:
        if e.kind in ("down", "auth"):
            raise
        st.caption(f"Seed groups unavailable ({ui.md(e.message)}); showing runs one by one.")
        return None


def has_seed_groups(body: Mapping[str, Any] | None) -> bool:
    """True when some group holds two or more runs (only then is aggregating worth a toggle)."""
    return bool(body) and any(len(g.get("run_ids") or []) > 1 for g in body["groups"])


def group_name(g: Mapping[str, Any]) -> str:
    n = len(g.get("run_ids") or [])
    return f"{g['label']} · {n} seed{'s' if n != 1 else ''}"


def choose_baseline(body: dict, url: str, token: str | None, ids: tuple[int, ...], versions: tuple) -> dict:
    """Baseline group selector (default: the API's, i.e. the first GRPO group); re-asks the API
    for ratios and tests against another group when one is picked."""
    keys = [g["key"] for g in body["groups"]]
    by_key = {g["key"]: g for g in body["groups"]}
    chosen = st.selectbox("Baseline group", keys, index=keys.index(body["baseline"]) if body["baseline"] in keys else 0,
                          key="cmp_baseline_group", format_func=lambda k: group_name(by_key[k]),
                          help="Ratios and p-values are against this group (default: the first GRPO group).")
    if chosen == body["baseline"]:
        return body
    return ui.compare_groups(url, token, ids, by_key[chosen]["run_ids"][0], versions) or body


def band_of(g: Mapping[str, Any], key: str, dash: str = "solid") -> Band | None:
    """A group's curve for ``key`` as a Band, or None when the API returned none."""
    c = (g.get("curves") or {}).get(key)
    if not c or not c.get("x"):
        return None
    return Band(g["label"], g["method"], c["x"], c["mean"], c["lo"], c["hi"], c["n"], dash)


def metric_label(key: str) -> str:
    """The metric selector's text: the key, and for the eval key what it is."""
    return f"held-out Avg@k, all benchmarks ({key})" if key == EVAL_KEY else key


def curve_title(key: str) -> str:
    """The training-curve chart's title: the key, and for rewards what they measure (AERO's
    reward/mean is over rescue-tilted generated rollouts and must not read as accuracy)."""
    if key == EVAL_KEY:
        return "held-out Avg@k (overall) at each evaluation"
    return subtitled(f"{key} per step", REWARD_NOTES.get(key, ""))


def curves_section(ids: tuple[int, ...], versions: tuple, curves: Mapping[str, tuple[str, str | None]],
                   style: MethodStyle) -> tuple[str, dict]:
    """Mean ± band per group for the chosen metric and x axis; returns (axis, the curves body)."""
    url, token = ui.api_url(), ui.api_token()
    st.subheader("Training curves")
    c1, c2 = st.columns([2, 3])
    axis = c1.segmented_control("x axis", list(tables.X_AXES), default="step", format_func=tables.X_AXES.get, key="cmp_x") or "step"
    key = c2.selectbox("Metric", list(curves), key="cmp_metric", format_func=metric_label, help="Keys as in docs/metrics.md.")
    body = ui.compare_curves(url, token, ids, tuple(dict.fromkeys((key, *ZERO_KEYS))), axis, GRID_POINTS, versions)
    lv = level(body.get("alpha"))
    dashes = style.dash_by_method([g["method"] for g in body["groups"]])
    bands = [b for g, d in zip(body["groups"], dashes) if (b := band_of(g, key, d)) is not None]
    y_title, fmt = curves[key]
    ui.plot(compare_charts.band_figure(bands, style=style, title=curve_title(key), x_title=tables.X_AXES[axis], y_title=y_title,
                                       y_tickformat=fmt, level=lv, clip=(0.0, 1.0) if key in FRACTIONS else (0.0, float("inf")),
                                       counts=key in COUNTS))
    st.caption(f"Line: the mean over a group's seeds, each run interpolated linearly onto a common grid. Band: {lv}% "
               "Student-t confidence interval across seeds at each point (no band where fewer than 2 seeds reach it). "
               "Hover for the mean, the interval and how many seeds; the shading stops at what the metric can reach "
               "(0, and 1 for fractions). Each method has its colour; groups differ by dash, also across methods, so "
               "curves that coincide stay visible."
               + (" Cumulative FLOPs sum `flops/total` over every step; wall time is `time/elapsed_s`." if axis != "step" else ""))
    return axis, body


def zero_acc_section(body: Mapping[str, Any], axis: str, style: MethodStyle) -> None:
    """Paper Fig. 9 per group: after-rescue mean and band, after-explore mean dotted."""
    st.subheader("Prompts with no correct answer (paper Fig. 9)")
    dashes = style.dash_by_method([g["method"] for g in body["groups"]])
    rows = [(b, band_of(g, mk.ZERO_ACC_AFTER_EXPLORE)) for g, d in zip(body["groups"], dashes)
            if (b := band_of(g, mk.ZERO_ACC_AFTER_RESCUE, d)) is not None and any(v is not None for v in b.mean)]
    if not rows:
        st.caption("No zero-accuracy ratios logged yet.")
        return
    ui.plot(compare_charts.zero_acc_band_figure(rows, style=style, x_title=tables.X_AXES[axis], level=level(body.get("alpha"))))


def tables_section(body: Mapping[str, Any]) -> None:
    """The grouped cost summary and the grouped Table 1 (Avg@k and Pass@k), each with a CSV."""
    groups, base, lv = body["groups"], body["baseline"], level(body.get("alpha"))
    st.subheader("Cost and accuracy per group")
    summary = tables.group_summary_table(groups, base)
    widths = [1.6, 0.9] + [1.7 if c.startswith("FLOPs") else 1.4 for c in summary.columns[2:-1]] + [0.7]
    ui.plot(table_figure(summary.columns, summary.rows, summary.bold, col_widths=widths), key="group_summary")
    st.caption(f"Per-step means (time, FLOPs rollout + train, trained rollouts, zero-accuracy after rescue) and the last "
               f"evaluation pooled over benchmarks, each as **mean ± half the {lv}% Student-t CI across seeds**. Second line: "
               "the ratio to the baseline group **per seed pair** (seed s against the baseline's seed s), summarised as a geometric mean with its "
               "CI; *seed pairs* = how many pairs. Best mean of each column in **bold**, every tie (as shown) too.")
    st.download_button("Download summary (CSV)", summary.frame.to_csv(index=False).encode(), file_name="aero-groups-summary.csv",
                       mime="text/csv", icon=":material/download:", key="cmp_group_summary_csv")

    st.subheader("Benchmarks (paper Table 1)")
    if not any(g.get("evals") for g in groups):
        st.info("No evaluations yet: each run evaluates its held-out benchmarks every `eval_every` steps and at the end. "
                "The table fills in as results land.", icon=":material/table:")
        return
    parts = [tables.group_benchmark_table(groups, body.get("significance") or {}, base, m) for m in mk.EVAL_METRICS]
    for i, part in enumerate(parts):
        widths = [2.0] + [1.0] * (len(part.columns) - 2) + [1.6]
        ui.plot(table_figure(part.columns, part.rows, part.bold, col_widths=widths), key=f"group_bench_{i}")
    test = next((t.get("test") for ts in (body.get("significance") or {}).values() for t in ts if t.get("test")),
                "paired sign-flip permutation over problems")
    st.caption(f"Per benchmark: the metric of each run's last evaluation, **averaged over the group's seeds**. "
               f"*Total (P-value)*: pooled over benchmarks, and the two-sided p-value of the group against the baseline "
               f"({test}; each problem's score is first averaged over the group's seeds, so the test pairs problems, not "
               "seeds). The baseline shows —. Best of each column in **bold**, every tie (as shown) too.")
    frame = parts[0].frame.merge(parts[1].frame, on=["group", "label", "method", "baseline", "seeds"])
    st.download_button("Download benchmarks (CSV)", frame.to_csv(index=False).encode(), file_name="aero-groups-benchmarks.csv",
                       mime="text/csv", icon=":material/download:", key="cmp_group_bench_csv")


# ---------------------------------------------------------------- the headline: accuracy vs compute, compute to reach


def baseline_name(label: str, method: str, style: MethodStyle) -> str:
    """'GRPO' for a plain GRPO group or run, else its label (what 'Compute to reach X's accuracy' names)."""
    return style.label(method) if label in (method, style.label(method)) else label


def target_lines(reach: Mapping[str, Any], name: str) -> list[tuple[float, str]]:
    """(accuracy, label) of each target of the reach block, for the headline charts."""
    return [(acc, f"{t['fraction']:.0%} of {name}'s gain") for t, acc in zip(reach.get("targets") or [], reach_tables.reach_target_accuracy(reach))
            if acc is not None]


def headline_section(bands: Mapping[str, list[Band]], reach: Mapping[str, Any] | None, entries: list[dict],
                     name: str, k: int | None, *, style: MethodStyle, seeds: bool, level: int = 95) -> None:
    """The paper's headline, first on the Compare page: held-out Avg@k against training FLOPs
    and against training time side by side (``bands[axis]``: one per method or run), then the
    "Compute to reach <name>'s accuracy" table from the API's ``reach`` block (``entries``
    shaped by reach_tables.run_reach_entries / group_reach_entries)."""
    kk = k or "k"
    window = (reach or {}).get("window") or 3
    st.subheader(f"Held-out Avg@{kk} against training compute")
    lines = target_lines(reach or {}, name)
    cols = st.columns(2)
    for col, (axis, (what, x_title, ticks)) in zip(cols, HEADLINE_AXES.items()):
        with col:
            if not any(v is not None for b in bands.get(axis) or [] for v in b.mean):
                st.caption(f"No held-out evaluation with a {what} value yet: runs evaluate at step 0 and every `eval_every` steps.")
                continue
            ui.plot(compare_charts.headline_figure(bands[axis], style=style, title=f"Held-out Avg@{kk} vs {what}", x_title=x_title,
                                                   y_title=f"held-out Avg@{kk} (0–1)", level=level, targets=lines,
                                                   x_tickformat=ticks, seeds=seeds), key=f"headline_{axis}")
    st.caption(f"Each curve is held-out **Avg@{kk}** pooled over every benchmark's fixed problems (`overall`), measured at "
               "the run's evaluation temperature (`eval_temperature`, independent of training), with sampling draws seeded by "
               "the evaluation step so every method is scored on the same, paired draws. Each run's curve is smoothed by a "
               f"trailing mean over {window} evaluations. x: cumulative training FLOPs (`flops/total`, rollout + train) and "
               "training wall time (`time/elapsed_s`); **evaluation time is not on the x axis**. "
               + (f"Line: the mean over a group's seeds; band: {level}% Student-t CI across seeds. " if seeds else "")
               + (f"Dotted: the targets of the table below (fractions of {ui.md(name)}'s gain over the step-0 accuracy)." if lines else ""))
    reach_section(reach, entries, name, k, seeds=seeds, level=level)


def reach_section(reach: Mapping[str, Any] | None, entries: list[dict], name: str, k: int | None, *, seeds: bool,
                  level: int = 95) -> None:
    """'Compute to reach <name>'s accuracy': per method and target, FLOPs and training seconds to
    first reach it and the ratio to the baseline at equal accuracy; 'not reached' kept."""
    st.subheader(f"Compute to reach {ui.md(name)}'s accuracy")
    if not reach:
        st.caption("This API does not report compute to reach (an older version).")
        return
    if reach.get("reason") or not reach.get("targets"):
        st.info(f"No targets yet: {ui.md(reach.get('reason') or 'no evaluations')}. The targets are fractions of {ui.md(name)}'s gain "
                f"over its step-0 evaluation, so {ui.md(name)} needs a step-0 evaluation (`eval_every` > 0) and a gain.",
                icon=":material/flag:")
        return
    kk = k or "k"
    table = reach_tables.reach_table(entries, reach, name, k=k, seeds=seeds)
    widths = [1.4] + [2.2] * (len(table.columns) - 1)
    ui.plot(table_figure(table.columns, table.rows, table.bold, col_widths=widths), key="reach_table")
    window = reach.get("window") or 3
    spread = (f"mean ± half the {level}% Student-t CI over the seeds that reached it; then the ratio to {ui.md(name)} at "
              "equal accuracy, per seed pair, as a geometric mean [CI]. *not reached (k/n seeds)*: k of the n seed pairs "
              "never reached the target during their run; their compute is not averaged in." if seeds else
              f"then the ratio to {ui.md(name)} at equal accuracy. *not reached*: the run never reached the target.")
    st.caption(f"Targets: {ui.md(name)}'s step-0 Avg@{kk} plus 50/75/90/100% of its gain, its final accuracy being the mean of its "
               f"last {window} evaluations. Per target: cumulative training FLOPs and training seconds (evaluation excluded) at "
               f"the first evaluation whose trailing mean over {window} evaluations reaches it, {spread} "
               "Least FLOPs per target in **bold**, every tie (as shown) too. Why: docs/comparisons.md, *Compute to reach the same accuracy*.")
    st.download_button("Download compute to reach (CSV)", table.frame.to_csv(index=False).encode(), file_name="aero-reach.csv",
                       mime="text/csv", icon=":material/download:", key="cmp_reach_csv")


def group_headline(body: Mapping[str, Any], ids: tuple[int, ...], versions: tuple, style: MethodStyle) -> None:
    """The headline for seed groups: mean Avg@k per group with bands, and the paired reach table."""
    url, token = ui.api_url(), ui.api_token()
    reach = body.get("reach")
    window = (reach or {}).get("window") or 3
    dashes = style.dash_by_method([g["method"] for g in body["groups"]])
    bands = {}
    for axis in HEADLINE_AXES:
        curves = ui.compare_curves(url, token, ids, (EVAL_KEY,), axis, GRID_POINTS, versions, window)
        bands[axis] = [b for g, d in zip(curves["groups"], dashes) if (b := band_of(g, EVAL_KEY, d)) is not None]
    base = next((g for g in body["groups"] if g["key"] == body["baseline"]), body["groups"][0])
    headline_section(bands, reach, reach_tables.group_reach_entries(reach or {}), baseline_name(base["label"], base["method"], style),
                     body.get("k"), style=style, seeds=True, level=level(body.get("alpha")))


def arena_section(body: Mapping[str, Any], style: MethodStyle) -> None:
    """The rollout-allocation arena's leaderboard (docs/comparisons.md "The rollout-allocation
    arena"): every seed group against the baseline group, from the same GET /compare/groups answer."""
    st.subheader("Leaderboard (rollout-allocation arena)")
    if len(body["groups"]) < 2:
        st.caption("Choose runs of at least two methods (or configs) to rank them against the baseline.")
        return
    table = reach_tables.arena_table(body)
    widths = [1.5, 0.8, 1.1, 2.2, 1.1, 1.0, 0.9, 0.9, 0.9, 1.9, 1.9, 1.9]
    ui.plot(table_figure(table.columns, table.rows, table.bold, col_widths=widths), key="arena_table")
    lv = level(body.get("alpha"))
    if points := reach_tables.arena_points(body):
        ui.plot(arena_figure(points, style=style, k=table.k, level=lv), key="arena_tradeoff")
    st.caption(f"Sorted by final Avg@{table.k or 'k'} (the last evaluation pooled over benchmarks, mean ± half the {lv}% "
               "Student-t CI across seeds). *diff vs baseline*: mean difference per problem against the baseline group "
               "with its CI and the p-value of the paired sign-flip permutation test over problems (seeds averaged). "
               "Costs are per-step means under one accounting for every method (FLOPs of rollout + train from token "
               "counts, wall seconds per step); *rollouts gen / trained*: what each method generated and trained within "
               "the same n_total per prompt. The last columns give, **per seed**, the training FLOPs and seconds at the "
               "first evaluation that reaches 50/75/90% of the baseline's gain; *not reached* stays in the table. "
               "The chart plots each group's final Avg@k against its FLOPs per step, with the CI across seeds on both. "
               "How to read it: docs/comparisons.md, *The rollout-allocation arena*.")
    st.download_button("Download leaderboard (CSV)", table.frame.to_csv(index=False).encode(), file_name="aero-arena.csv",
                       mime="text/csv", icon=":material/download:", key="cmp_arena_csv")


def doc_link() -> None:
    """'How to read a comparison' (docs/comparisons.md), shown in place: the dashboard has no
    docs server, and the file ships with the checkout it runs from."""
    with st.expander("How to read a comparison (docs/comparisons.md)", icon=":material/menu_book:"):
        if DOC.exists():
            # images are relative to docs/, which the dashboard does not serve: leave them out
            st.markdown("\n".join(line for line in DOC.read_text().splitlines() if not line.startswith("![")))
        else:
            st.caption("See docs/comparisons.md in the AERO Lab repository.")


def group_page(body: dict, ids: tuple[int, ...], versions: tuple, curves: Mapping[str, tuple[str, str | None]],
               waterfall: Any, style: MethodStyle) -> None:
    """The whole group view: baseline group, the headline (accuracy vs compute, compute to reach),
    the arena's leaderboard, curves, waterfall (``waterfall()`` draws it), Fig. 9, tables."""
    url, token = ui.api_url(), ui.api_token()
    body = choose_baseline(body, url, token, ids, versions)
    group_headline(body, ids, versions, style)
    arena_section(body, style)
    st.caption(" · ".join(ui.md(group_name(g)) + (" (baseline)" if g["key"] == body["baseline"] else "") for g in body["groups"]))
    doc_link()
    axis, curve_body = curves_section(ids, versions, curves, style)
    waterfall()
    zero_acc_section(curve_body, axis, style)
    tables_section(body)
