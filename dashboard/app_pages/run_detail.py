"""Run detail: one run's live curves (a fragment re-polls the API every 2 s while the run is
queued or running, without reloading the page), held-out accuracy first once it has evaluated,
its evaluations, its config and, for a failed run, the error text."""

import streamlit as st

import common.metric_keys as mk
from common.fmt import pct
from common.run_state import waited_text
from dashboard import rollouts_view, run_actions, run_charts, step_detail_view, tables, ui
from dashboard.client import ApiError
from dashboard.method_style import MethodStyle
from dashboard.plotting import has_any

st.title("Run detail")

KEYS = (
    mk.REWARD_MEAN, mk.REWARD_TRAINED_MEAN, mk.ZERO_ACC_AFTER_EXPLORE, mk.ZERO_ACC_AFTER_RESCUE,
    mk.STRATA_RESCUE, mk.STRATA_LOW, mk.STRATA_HIGH, mk.ROLLOUTS_GENERATED, mk.ROLLOUTS_TRAINED,
    mk.STEP_S, mk.ROLLOUT_S, mk.REWARD_S, mk.TRAIN_S, mk.ELAPSED_S,
    mk.FLOPS_ROLLOUT, mk.FLOPS_TRAIN, mk.FLOPS_TOTAL, mk.TRAIN_GRAD_NORM, mk.TRAIN_ENTROPY, mk.TRAIN_KL,
    *run_charts.OFFPOLICY_KEYS,
)
MAX_POINTS = 600  # per curve; the API decimates (the last step is always kept)
REFRESH_S = 2


def pick_run(style: MethodStyle) -> dict | None:
    """The run named by ``?run=ID``, else a choice among the newest runs."""
    runs = ui.runs_page(ui.api_url(), ui.api_token(), limit=200)["data"]
    wanted = st.query_params.get("run")
    if not runs and not wanted:
        st.info("**No runs yet.** Launch one and its curves appear here while it trains.", icon=":material/lightbulb:")
        st.page_link(ui.PAGES["launch"], label="Launch a run", icon=":material/rocket_launch:")
        return None
    by_id = {r["id"]: r for r in runs}
    if wanted and wanted.isdigit() and int(wanted) not in by_id:
        by_id = {int(wanted): ui.client().get_run(int(wanted)), **by_id}  # older than the list: 404 is explained
    ids = list(by_id)
    default = int(wanted) if wanted and wanted.isdigit() else ids[0]
    chosen = st.selectbox("Run", ids, index=ids.index(default), format_func=lambda i: tables.run_label(by_id[i], style),
                          key="detail_run")
    if st.query_params.get("run") != str(chosen):
        st.query_params["run"] = str(chosen)
    return ui.client().get_run(chosen)


def header(run: dict, style: MethodStyle) -> None:
    st.html(f"<h3 style='margin:0'>#{run['id']} {ui.esc(run['name'])}</h3>" + ui.method_chip(run["method"], style))
    if run.get("owner"):
        st.caption(f"Submitted by **{ui.md(run['owner'])}**")
    if run["status"] == "failed":
        st.error("**This run failed.** The worker reported:", icon=":material/error:")
        st.code(run.get("error") or "(no error text was recorded)", language=None)
    elif run["status"] == "cancelled":
        st.warning(f"Cancelled at step {run['current_step']} of {run['total_steps']}.", icon=":material/stop_circle:")
    elif run["status"] == "queued":
        msg = "Queued: waiting for a free worker (`aero up` starts one; `aero worker` adds more)."
        st.info(msg + (f" Note: {ui.md(run['error'])}" if run.get("error") else ""), icon=":material/hourglass_top:")
    if run["status"] == "running" and run.get("cancel_requested"):
        st.warning("Cancel requested: the worker stops within one step.", icon=":material/stop_circle:")
    if run["status"] == "running" and run.get("waiting_for"):
        waited = waited_text(run)
        st.info(f"**Waiting for its GPUs**{f' (for {waited})' if waited else ''}: {ui.md(run['waiting_for'])}. "
                "Other runs hold them; it starts as soon as they "
                "are free (it has not failed, and can be cancelled).", icon=":material/hourglass_top:")
    resources_line(run)
    c1, c2, c3 = st.columns([2, 2, 5])
    if ui.is_live(run) and not run.get("cancel_requested") and ui.may_change(run):
        if c3.button("Cancel run", icon=":material/stop_circle:", key="detail_cancel"):
            try:
                ui.client().cancel_run(run["id"])
            except ApiError as e:
                ui.show_error(e, "cancel the run")
            else:
                ui.clear_caches()
                st.rerun()
    c2.link_button("Metrics CSV", f"{ui.api_url()}/api/runs/{run['id']}/export?format=csv", icon=":material/download:")
    with c1:
        st.page_link(ui.PAGES["compare"], label="Compare with its sweep" if run.get("sweep_id") else "Compare",
                     query_params={"sweep": str(run["sweep_id"])} if run.get("sweep_id") else {"runs": str(run["id"])},
                     icon=":material/compare_arrows:")


def resources_line(run: dict) -> None:
    """What the run asked for (its config's resources) and where Ray placed it."""
    res = (run.get("config") or {}).get("resources") or {}
    asked = (f"{res.get('gpus_per_node') if res.get('gpus_per_node') is not None else 'auto'} GPU(s) per node x "
             f"{res.get('nodes', 1)} node(s)" + (f", rollout TP {res['rollout_tp']}" if res.get("rollout_tp", 1) > 1 else ""))
    where = run.get("placement") or {}
    placed = ""
    if where.get("gpu_ids"):
        gpus = "; ".join(f"{ip}: GPU {','.join(ids)}" for ip, ids in zip(where.get("node_ips", []), where["gpu_ids"]))
        placed = f" · placed on {gpus} ({'a Ray of its own' if where.get('cluster') == 'own' else 'Ray ' + where['cluster']}" \
                 f", waited {where.get('waited_s', 0):.1f} s)"
    st.caption(f"Resources: {ui.md(asked)}{ui.md(placed)}")


def progress(run: dict, summary: dict, style: MethodStyle) -> None:
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Step", f"{run['current_step']} / {run['total_steps']}")
    c2.metric("Status", run["status"])
    reward = summary.get(mk.REWARD_MEAN)
    c3.metric("Reward (last step)", "–" if reward is None else f"{reward:.3f}",
              help="Mean reward of this step's generated rollouts (`reward/mean`): a training signal, not held-out accuracy. "
                   "For AERO they include rescue rounds on prompts with no correct answer, so it runs lower by construction.")
    mean_s, last_s = summary.get(tables.STEP_TIME_MEAN), summary.get(mk.STEP_S)
    c4.metric("Mean step time", "–" if mean_s is None else f"{mean_s:.2f} s",
              help="Seconds per step (`time/step_s`) averaged over the run's steps, as on the Runs page: what methods are "
                   "compared by." + ("" if last_s is None else f" Last step: {last_s:.2f} s."))
    done = float(run["progress"] or 0.0)
    st.html(ui.progress_bar(done, run["method"], style, f"{pct(done)} of {run['total_steps']} steps"))


def heldout(run: dict, rows: list[dict], style: MethodStyle) -> list:
    """The held-out Avg@k chart (every benchmark pooled) when the run has evaluated: the first
    chart, since held-out accuracy, not the training reward, is what a run is judged by."""
    overall = sorted((e for e in rows if e["benchmark"] == mk.OVERALL), key=lambda e: e["step"])
    if not overall:
        return []
    k = overall[-1].get("k")
    return [run_charts.heldout_figure([e["step"] for e in overall], [e["avg_at_k"] for e in overall],
                                      [e["pass_at_k"] for e in overall], run["method"], k, style=style)]


def kl_on(run: dict) -> bool:
    """Whether the run penalises KL to the reference: with kl_coef 0 the trainer computes no KL,
    and a flat line at 0 would pass for a measured one."""
    return float(run["config"].get("kl_coef") or 0.0) != 0.0


def curves(run: dict, m: dict, rows: list[dict], style: MethodStyle) -> None:
    steps, s, method = m["steps"], m["series"], run["method"]
    if m["stored_steps"] > len(steps):
        st.caption(f"{m['stored_steps']} steps stored; curves show {len(steps)} evenly spaced ones (the last step always).")
    figs = [*heldout(run, rows, style), run_charts.reward_figure(steps, s, method, style=style),
            run_charts.zero_acc_figure(steps, s, method, style=style)]
    if has_any(s, mk.STRATA_RESCUE, mk.STRATA_LOW, mk.STRATA_HIGH):
        figs.append(run_charts.strata_figure(steps, s))
    figs += [run_charts.rollouts_figure(steps, s, method, style=style), run_charts.time_split_figure(steps, s),
             run_charts.flops_figure(steps, s)]
    for i in range(0, len(figs), 2):
        cols = st.columns(2)
        for col, fig in zip(cols, figs[i:i + 2]):
            with col:
                ui.plot(fig)
    ui.plot(run_charts.health_figure(steps, s, method, style=style, kl=kl_on(run)))
    if has_any(s, *run_charts.OFFPOLICY_KEYS):  # an asynchronous run (offpolicy.max_staleness > 0)
        ui.plot(run_charts.offpolicy_figure(steps, s, method, style=style))


def eval_section(run: dict, rows: list[dict]) -> None:
    st.subheader("Evaluation")
    if not rows:
        every = run["config"].get("eval_every")
        when = f"every {every} steps and at the end" if every else "at the end of training"
        st.caption(f"No evaluation yet: this run evaluates its held-out benchmarks {when}.")
        return
    df = tables.eval_frame(rows)
    k = int(df["k"].iloc[0]) if len(df) else 0
    st.caption(f"Latest evaluation per benchmark: Avg@{k} = mean fraction correct over the n samples of a problem; "
               f"Pass@{k} = unbiased estimate that one of {k} samples is correct; 95% bootstrap CIs over problems.")
    st.dataframe(df, hide_index=True, column_config={"Avg@k": st.column_config.NumberColumn(f"Avg@{k}", format="%.3f"),
                                                     "Pass@k": st.column_config.NumberColumn(f"Pass@{k}", format="%.3f")})


def live_panel(run_id: int, was_live: bool, style: MethodStyle) -> None:
    run = ui.client().get_run(run_id)
    if was_live and not ui.is_live(run):
        ui.clear_caches()  # the runs list (run picker labels) still says running
        st.rerun()  # finished: redraw the whole page once, without the timer
    m = ui.metrics(ui.api_url(), ui.api_token(), run_id, KEYS, MAX_POINTS, ui.version(run))
    rows = ui.evals(ui.api_url(), ui.api_token(), run_id, ui.version(run))
    progress(run, tables.run_summary(m), style)
    if not m["steps"]:
        st.info("No training step has been logged yet." + (" Curves appear here as soon as the first step lands — "
                "no need to reload." if ui.is_live(run) else ""), icon=":material/hourglass_empty:")
    else:
        curves(run, m, rows, style)
    step_detail_view.key_picker(run, style)  # in the fragment: a live run's system panels and heatmaps refresh too
    step_detail_view.heatmaps(run)
    eval_section(run, rows)


def rollouts_panel(run: dict, live: bool) -> None:
    """The Rollouts view; while the run trains, a fragment on the page's timer re-reads the run so
    new steps' samples appear, and a view left on the newest step moves on with them."""
    rollouts_view.section(ui.client().get_run(run["id"]) if live else run)


@ui.guarded
def main() -> None:
    style = ui.method_style()
    run = pick_run(style)
    if run is None:
        return
    header(run, style)
    run_actions.show(run)  # alert badge, resume, clone, notes and tags
    live = ui.is_live(run)
    if live:
        st.caption(f":green[●] Live: refreshing every {REFRESH_S} s.")
    st.fragment(ui.guarded(live_panel), run_every=REFRESH_S if live else None)(run["id"], live, style)
    st.fragment(ui.guarded(rollouts_panel), run_every=REFRESH_S if live else None)(run, live)
    with st.expander("Config", icon=":material/tune:"):
        st.json(run["config"], expanded=True)
    with st.expander("Run record", icon=":material/info:"):
        st.json({k: run.get(k) for k in ("queue", "worker", "attempts", "gpus", "placement", "created_at", "started_at",
                                           "finished_at", "heartbeat_at", "tags", "notes", "sweep_id")}, expanded=True)


main()
