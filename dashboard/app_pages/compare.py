"""Compare runs or a whole sweep. First the paper's headline: held-out Avg@k against training
FLOPs and against training time, and the compute each method needs to reach the baseline's
(GRPO's) accuracy. Then overlaid curves on a chosen x axis (held-out Avg@k by default), the
savings waterfall (paper Fig. 8; measured from ablation runs when present, else
counterfactual, and labelled which), zero-accuracy curves (Fig. 9) and a benchmark table
(Table 1) with a CSV download. When the runs hold seed groups (same config, several seeds),
"Aggregate seeds" switches all of it to per-group means with confidence bands, paired by seed
(dashboard/group_view.py)."""

import streamlit as st

import common.metric_keys as mk
from dashboard import compare_charts, group_view, reach_tables, tables, ui
from dashboard.compare_charts import Band
from dashboard.method_style import MethodStyle
from dashboard.plotting import Curve, lines_figure, table_figure
from dashboard.waterfall_chart import COUNTERFACTUAL_GRPO, WATERFALL_UNITS, waterfall_figure

st.title("Compare")

MAX_RUNS = 50  # the API's limit per /compare call
MAX_POINTS = 400  # per curve, decimated by the API
CURVES: dict[str, tuple[str, str | None]] = {  # key -> (y axis title with unit, tick format); the first is the default
    group_view.EVAL_KEY: ("held-out Avg@k, all benchmarks pooled (0–1)", None),
    mk.REWARD_MEAN: ("mean reward of generated rollouts (0–1)", None),
    mk.REWARD_TRAINED_MEAN: ("mean reward of trained rollouts (0–1)", None),
    mk.ZERO_ACC_AFTER_RESCUE: ("zero-accuracy ratio after rescue", ".0%"),
    mk.ALL_CORRECT_RATIO: ("all-correct ratio", ".0%"),
    mk.ROLLOUTS_TRAINED: ("trained rollouts per step", None),
    mk.TOKENS_TRAINED: ("trained tokens per step", "~s"),
    mk.STEP_S: ("seconds per step", None),
    mk.TRAIN_S: ("training seconds per step", None),
    mk.FLOPS_TOTAL: ("FLOPs per step", "~s"),
    mk.ADV_ABS_MEAN: ("mean |advantage|", None),
    mk.ADV_ZERO_FRAC: ("zero-advantage fraction of trained rollouts", ".0%"),
    mk.TRAIN_ENTROPY: ("entropy (nats/token)", None),
    mk.TRAIN_GRAD_NORM: ("gradient norm (before clipping)", None),
}
def offered_curves(runs: list[dict]) -> dict[str, tuple[str, str | None]]:
    """The curated curves first, then every other key any of ``runs`` logged (GET /runs/{id}/metrics/keys)."""
    url, token = ui.api_url(), ui.api_token()
    logged = sorted({k for r in runs for k in ui.metric_keys(url, token, r["id"], ui.version(r))})
    return {**CURVES, **{k: (k, None) for k in logged if k not in CURVES}}


BASE_KEYS = (mk.FLOPS_TOTAL, mk.STEP_S, mk.ELAPSED_S, mk.ZERO_ACC_AFTER_EXPLORE, mk.ZERO_ACC_AFTER_RESCUE)


def choose_runs(style: MethodStyle) -> list[dict]:
    url, token = ui.api_url(), ui.api_token()
    runs = ui.runs_page(url, token, limit=500)["data"]
    if not runs:
        st.info("**No runs yet.** Launch a sweep of GRPO, AERO S1, AERO S1+S2 and AERO to see every chart on this page.",
                icon=":material/lightbulb:")
        st.page_link(ui.PAGES["launch"], label="Launch a sweep", icon=":material/rocket_launch:")
        return []
    names = {sw["id"]: sw["name"] for sw in ui.sweeps_page(url, token, limit=500)["data"]}
    sweeps = list(names)
    qp_sweep, qp_runs = st.query_params.get("sweep"), st.query_params.get("runs")
    default_mode = "Runs" if qp_runs or not sweeps else "A sweep"
    mode = st.segmented_control("Compare", ["A sweep", "Runs"], default=default_mode, key="cmp_mode") or default_mode
    if mode == "A sweep":
        if not sweeps:
            st.info("No sweeps yet: launch one from the Launch page (choose *Sweep*), or compare chosen runs.")
            return []
        default = int(qp_sweep) if qp_sweep and qp_sweep.isdigit() and int(qp_sweep) in sweeps else sweeps[0]
        sid = st.selectbox("Sweep", sweeps, index=sweeps.index(default), key="cmp_sweep", format_func=lambda s: f"sweep #{s} · {names[s]}")
        st.query_params.update({"sweep": str(sid)})
        st.query_params.pop("runs", None)
        chosen = ui.sweep(url, token, sid)["runs"]
    else:
        by_id = {r["id"]: r for r in runs}
        wanted = [int(x) for x in (qp_runs or "").split(",") if x.strip().isdigit() and int(x) in by_id]
        default = wanted or [r["id"] for r in runs if r["current_step"] > 0][:4]
        ids = st.multiselect("Runs", list(by_id), default=default, format_func=lambda i: tables.run_label(by_id[i], style),
                             key="cmp_runs", max_selections=MAX_RUNS)
        st.query_params.update({"runs": ",".join(map(str, ids))})
        st.query_params.pop("sweep", None)
        chosen = [by_id[i] for i in ids]
    if len(chosen) > MAX_RUNS:
        st.warning(f"Showing the first {MAX_RUNS} of {len(chosen)} runs.")
        chosen = chosen[:MAX_RUNS]
    return chosen


def run_name(r: dict, style: MethodStyle) -> str:
    """'#3 AERO s0', and 'k=2' after it for an asynchronous run (runs are compared by staleness too)."""
    seed, k = r.get("config", {}).get("seed"), tables.staleness_tag(r.get("config"))
    return f"#{r['id']} {style.label(r['method'])}" + (f" s{seed}" if seed is not None else "") + (f" {k}" if k else "")


def dashes(runs: list[dict], style: MethodStyle) -> dict[int, str]:
    """{run id: dash}, the same rule as every multi-run chart (MethodStyle.dash_by_method): runs of one
    method differ by dash, and the first runs of two methods too, so coinciding curves stay visible."""
    return {r["id"]: d for r, d in zip(runs, style.dash_by_method([r["method"] for r in runs]))}


def eval_bands(runs: list[dict], axis: str, smooth: int, versions: tuple, style: MethodStyle) -> list[Band]:
    """Each run's held-out Avg@k (overall) at its eval steps on ``axis``, smoothed over ``smooth``
    evaluations, from GET /compare/curves with every run as its own group (exact x, no seeds averaged)."""
    ids = tuple(r["id"] for r in runs)
    curves = ui.run_curves(ui.api_url(), ui.api_token(), ids, (group_view.EVAL_KEY,), axis, 200, versions, smooth)
    dash = dashes(runs, style)
    out = []
    for r in runs:
        c = (curves.get(r["id"]) or {}).get(group_view.EVAL_KEY)
        if c and c.get("x"):
            out.append(Band(run_name(r, style), r["method"], c["x"], c["mean"], [None] * len(c["x"]), [None] * len(c["x"]),
                            c["n"], dash[r["id"]]))
    return out


def eval_k(cmp: dict) -> int | None:
    """The k of the compared runs' pooled evaluations when they share one."""
    ks = {(s.get("evals") or {}).get(mk.OVERALL, {}).get("k") for s in cmp["runs"]} - {None}
    return ks.pop() if len(ks) == 1 else None


def headline(runs: list[dict], cmp: dict, versions: tuple, style: MethodStyle) -> None:
    """The paper's headline for runs one by one: Avg@k vs FLOPs and vs time, compute to reach."""
    reach = cmp.get("reach")
    window = (reach or {}).get("window") or 3
    bands = {axis: eval_bands(runs, axis, window, versions, style) for axis in group_view.HEADLINE_AXES}
    base = next((r for r in runs if r["id"] == cmp["baseline"]), runs[0])
    labels, methods = {r["id"]: run_name(r, style) for r in runs}, {r["id"]: r["method"] for r in runs}
    group_view.headline_section(bands, reach, reach_tables.run_reach_entries(reach or {}, labels, methods),
                                style.label(base["method"]), eval_k(cmp), style=style, seeds=False)


def curves_section(runs: list[dict], data: dict[int, dict], versions: tuple, style: MethodStyle) -> str:
    st.subheader("Training curves")
    c1, c2, c3 = st.columns([2, 2, 1])
    axis = c1.segmented_control("x axis", list(tables.X_AXES), default="step", format_func=tables.X_AXES.get, key="cmp_x") or "step"
    offered = offered_curves(runs)
    key = c2.selectbox("Metric", list(offered), key="cmp_metric", format_func=group_view.metric_label,
                       help="Every key the runs logged (docs/metrics.md); eval/overall/avg_at_k is held-out Avg@k pooled over benchmarks, "
                            "at each evaluation.")
    window = c3.number_input("Smoothing (points)", min_value=1, max_value=200, value=1, key="cmp_smooth",
                             help="Trailing moving average over this many plotted points (evaluations for held-out Avg@k).")
    y_title, fmt = offered[key]
    title = group_view.curve_title(key)
    if key == group_view.EVAL_KEY:
        bands = eval_bands(runs, axis, int(window), versions, style)
        ui.plot(compare_charts.headline_figure(bands, style=style, title=title, x_title=tables.X_AXES[axis], y_title=y_title,
                                               seeds=False, height=340))
        return axis
    dash = dashes(runs, style)
    curves = [Curve(run_name(r, style), r["method"], tables.x_values(data[r["id"]], axis),
                    tables.smooth(data[r["id"]]["series"].get(key) or [], window), dash=dash[r["id"]])
              for r in runs]
    ui.plot(lines_figure(curves, style=style, title=title, x_title=tables.X_AXES[axis], y_title=y_title, y_tickformat=fmt,
                         counts=key in group_view.COUNTS))
    if axis != "step":
        st.caption("Cumulative x values integrate the plotted points (exact when no step was decimated away); "
                   "wall time is the run's logged training time `time/elapsed_s` (evaluation excluded).")
    return axis


def measured_grpo(cmp: dict, unit: str, style: MethodStyle) -> tuple[float, str] | None:
    """(mean per step, label) of the first compared GRPO run in a counterfactual waterfall's unit
    (training seconds or training FLOPs), to draw beside the counterfactual GRPO bar; None when
    no GRPO run is compared or the unit has no measured counterpart."""
    key = {"seconds": mk.TRAIN_S, "flops": mk.FLOPS_TRAIN}.get(unit)
    base = style.baseline
    grpo = next((r for r in cmp["runs"] if r.get("method") == base and (r.get("mean") or {}).get(key) is not None), None)
    if key is None or grpo is None:
        return None
    return grpo["mean"][key], f"{style.label(base)} run #{grpo['run_id']}, measured"


def waterfall_section(cmp: dict, style: MethodStyle) -> None:
    st.subheader("Where AERO saves compute (paper Fig. 8)")
    measured = [w for w in cmp["waterfall"]["measured"] if w.get("per_step")]
    counterfactual = [w for w in cmp["waterfall"]["counterfactual"] if w.get("per_step")]
    options = measured + counterfactual
    if not options:
        st.info("No waterfall yet. It needs either an AERO-family run that has logged steps (*counterfactual*: what "
                "S1, S2, S3 saved against GRPO at the same budget, from its `savings/*` metrics) or a sweep with GRPO, "
                "AERO S1, AERO S1+S2 and AERO runs (*measured*: the difference between the ablation runs).",
                icon=":material/waterfall_chart:")
        for w in cmp["waterfall"]["measured"]:
            st.caption(ui.md(w["label"]))
        return
    labels = [("Measured" if w["source"] == "measured" else "Counterfactual") + f" — {w['label']}" for w in options]
    i = st.selectbox("Source", range(len(options)), format_func=labels.__getitem__, key="cmp_wf") if len(options) > 1 else 0
    wf = options[i]
    whole = False
    if wf["source"] == "measured":
        whole = st.toggle("Whole step (generation included)", key="cmp_wf_whole",
                          help="Measured runs also show seconds per step and rollout+train FLOPs: rescue rounds cost "
                               "generation time that the training-only view cannot see.")
    units = ("step_seconds", "total_flops") if whole else ("seconds", "flops")
    kind = "Measured from ablation runs" if wf["source"] == "measured" else "Counterfactual accounting"
    cols = st.columns(2)
    for col, unit in zip(cols, units):
        per = wf["per_step"].get(unit)
        with col:
            if per is None:
                st.caption(f"No {WATERFALL_UNITS[unit][0]} in this source.")
                continue
            what = "Time" if "seconds" in unit else "FLOPs"
            counterfactual = wf["source"] != "measured"
            where = f"run #{wf['run_id']}" if counterfactual else f"sweep #{wf['sweep_id']}"
            ui.plot(waterfall_figure(per, unit, style=style, title=f"{what} per step: GRPO → AERO",
                                     subtitle=f"{kind.lower()}, {where}", counterfactual=counterfactual,
                                     measured_grpo=measured_grpo(cmp, unit, style) if counterfactual else None))
    scope = ("Bars count the whole step (generation included)." if whole else
             "Bars count training only (`time/train_s`, `flops/train`), while the table's *time / step* and *FLOPs / step* "
             "below are the whole step (generation included), so the two differ.")
    if wf["source"] == "measured":
        st.caption(f"**{kind}.** Each rung is the mean per step over the sweep's runs of that method (seeds averaged): "
                   f"S1 = GRPO − AERO S1, S2 = AERO S1 − AERO S1+S2, S3 = AERO S1+S2 − AERO. {scope}")
    else:
        st.caption(f"**{kind}.** The run logs, each step, what rescue (S1), the Bayesian baseline (S2) and rejection sampling "
                   f"(S3) saved against GRPO at the same rollout budget. The **{COUNTERFACTUAL_GRPO}**: it is what GRPO "
                   f"would have trained on this run's prompts, so it need not match a GRPO run of the table (a dashed line "
                   f"marks a compared GRPO run's measured training cost). {scope}")


def zero_acc_section(runs: list[dict], data: dict[int, dict], axis: str, style: MethodStyle) -> None:
    st.subheader("Prompts with no correct answer (paper Fig. 9)")
    rows = []
    for r in runs:
        s = data[r["id"]]["series"]
        if s.get(mk.ZERO_ACC_AFTER_RESCUE):
            rows.append((run_name(r, style), r["method"], tables.x_values(data[r["id"]], axis),
                         s.get(mk.ZERO_ACC_AFTER_EXPLORE) or [], s[mk.ZERO_ACC_AFTER_RESCUE]))
    if not rows:
        st.caption("No zero-accuracy ratios logged yet.")
        return
    ui.plot(compare_charts.zero_acc_compare_figure(rows, style=style, x_title=tables.X_AXES[axis]))


def table_section(runs: list[dict], cmp: dict, style: MethodStyle) -> None:
    st.subheader("Benchmarks and cost (paper Table 1)")
    url, token = ui.api_url(), ui.api_token()
    stats = {s["run_id"]: s for s in cmp["runs"]}
    entries = []
    for r in runs:
        st_ = stats.get(r["id"], {"mean": {}})
        entries.append({"run_id": r["id"], "label": run_name(r, style), "method": r["method"],
                        "time_s": st_["mean"].get(mk.STEP_S), "flops": st_["mean"].get(mk.FLOPS_TOTAL),
                        "evals": tables.latest_evals(ui.evals(url, token, r["id"], ui.version(r)))})
    if not any(e["evals"] for e in entries):
        st.info("No evaluations yet: each run evaluates its held-out benchmarks every `eval_every` steps and at the end. "
                "The table fills in as results land.", icon=":material/table:")
    bt = tables.benchmark_table(entries, cmp["baseline"])
    for i, part in enumerate((bt.part(("time", "FLOPs", "Avg@")), bt.part(("Pass@",)))):
        if len(part.columns) > 1:
            widths = [2.0] + [1.3 if c.startswith(("time", "FLOPs")) or c.endswith("total") else 1.0 for c in part.columns[1:]]
            ui.plot(table_figure(part.columns, part.rows, part.bold, col_widths=widths), key=f"bench_table_{i}")
    st.caption(f"Per step: mean seconds and FLOPs (rollout + train). Avg@{bt.k or 'k'} and Pass@{bt.k or 'k'}: the last "
               "evaluation of each run, 95% bootstrap CI below each value; 'total' pools every benchmark. Best of each "
               "column in **bold**, every run that ties it (as shown) too; (×) = ratio to the baseline run.")
    st.download_button("Download table (CSV)", bt.frame.to_csv(index=False).encode(), file_name="aero-compare.csv",
                       mime="text/csv", icon=":material/download:", key="cmp_csv")


@ui.guarded
def main() -> None:
    style = ui.method_style()
    runs = choose_runs(style)
    if not runs:
        return
    ids = [r["id"] for r in runs]
    url, token = ui.api_url(), ui.api_token()
    versions = tuple(ui.version(r) for r in runs)
    groups = group_view.seed_groups(url, token, tuple(ids), versions)
    if group_view.has_seed_groups(groups) and st.toggle(
            "Aggregate seeds", value=True, key="cmp_agg",
            help="Runs that differ only in their seed form a group: show each group's mean with a 95% band across seeds, "
                 "ratios per seed pair and p-values against a baseline group. Off: every run on its own."):
        if any(ui.is_live(r) for r in runs):
            st.caption("Some runs are still training: reload the page (or change a control) for their newest steps.")
        cmp = ui.compare(url, token, tuple(ids), None, versions)
        group_view.group_page(groups, tuple(ids), versions, offered_curves(runs), lambda: waterfall_section(cmp, style), style)
        return
    grpo = [r["id"] for r in runs if r["method"] == style.baseline]
    baseline = st.selectbox("Baseline", ids, index=ids.index(grpo[0]) if grpo else 0, key="cmp_baseline",
                            format_func=lambda i: run_name(next(r for r in runs if r["id"] == i), style),
                            help="Ratios in the table are against this run (default: the first GRPO run).")
    cmp = ui.compare(url, token, tuple(ids), baseline, versions)
    key = st.session_state.get("cmp_metric", next(iter(CURVES)))
    step_keys = () if key == group_view.EVAL_KEY else (key,)
    data = {r["id"]: ui.metrics(url, token, r["id"], tuple(dict.fromkeys((*step_keys, *BASE_KEYS))), MAX_POINTS, ui.version(r))
            for r in runs}
    if any(ui.is_live(r) for r in runs):
        st.caption("Some runs are still training: reload the page (or change a control) for their newest steps.")
    headline(runs, cmp, versions, style)
    axis = curves_section(runs, data, versions, style)
    waterfall_section(cmp, style)
    zero_acc_section(runs, data, axis, style)
    table_section(runs, cmp, style)


main()
