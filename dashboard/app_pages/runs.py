"""Runs: every run with its status (a run waiting for its GPUs as waiting, for how long and for
what), progress (a bar in its method's colour), mean step time, latest reward, zero-accuracy
ratio and owner; filters (``My runs``: the token's user's; ``waiting`` among the statuses); open,
compare, cancel and delete (shown only for runs the token may change). The table refreshes
itself while runs train."""

import streamlit as st

from dashboard import tables, ui
from dashboard.client import ApiError
from dashboard.method_style import OTHER_COLOR, MethodStyle

st.title("Runs")

STATUSES = ["queued", "waiting", "running", "succeeded", "failed", "cancelled"]  # waiting: running, waits for GPUs
STEP_POINTS = 1000  # points per run the step-time mean is taken over (the API decimates longer runs)
SWEEPS_LISTED = 500  # newest sweeps offered by the Sweep filter (the API's page limit)
STATUS_ICONS = {"queued": "⏳", "waiting": "⏸️", "running": "▶️", "succeeded": "✅", "failed": "❌", "cancelled": "⏹️"}
COLUMNS = {
    "id": st.column_config.NumberColumn("id", width="small"),
    # an image column: ProgressColumn paints every bar in one colour, a run's bar is in its method's (tables.progress_svg)
    "progress": st.column_config.ImageColumn("progress", width=140, help="Steps done, in the method's colour."),
    "mean step time (s)": st.column_config.NumberColumn("mean step time (s)", format="%.2f", help=(
        "Seconds per step (time/step_s: generation, reward and training), averaged over the run's steps; "
        f"over {STEP_POINTS} evenly spaced steps on longer runs.")),
    "reward": st.column_config.NumberColumn("reward", format="%.3f", help=(
        "Mean reward of the last step's generated rollouts (reward/mean): a training signal, not held-out accuracy; "
        "for AERO they include rescue rounds on unsolved prompts, so it reads lower.")),
    # percent values with one decimal, like every percentage of the dashboard (Streamlit's "percent" gives 30% and 86.67%)
    "zero-acc ratio": st.column_config.NumberColumn("zero-acc ratio", format="%.1f%%",
                                                    help="Prompts with no correct rollout after rescue, last step."),
    "sweep": st.column_config.NumberColumn("sweep", format="%d"),
    "owner": st.column_config.TextColumn("owner", help="The user who submitted the run."),
    "open": st.column_config.LinkColumn("open", display_text="open ↗", help="Open the run's live page."),
    "status": st.column_config.TextColumn("status", help=(
        "The run's state; waiting: claimed by a worker, waiting for its GPUs (for how long: since it began to wait).")),
    "waits for": st.column_config.TextColumn("waits for", help="What a waiting run waits for: the GPUs it asked for and "
                                             "what is free now; it starts as soon as they are."),
    "message": st.column_config.TextColumn("message", help="Why a run failed or was re-queued."),
}


def sweep_label(sweep_id: int | None, names: dict[int, str]) -> str:
    """The Sweep filter's text: 'all sweeps' or 'sweep #3 · ladder' (a bare id, or 0 for "any", says nothing)."""
    if sweep_id is None:
        return "all sweeps"
    return f"sweep #{sweep_id} · {names[sweep_id]}" if sweep_id in names else f"sweep #{sweep_id}"


def filters(style: MethodStyle) -> dict:
    who = ui.me()
    mine = st.toggle("My runs", key="runs_mine", disabled=who is None,
                     help="Only the runs your token's user submitted." if who else "Needs a valid API token.")
    c1, c2, c3, c4 = st.columns([3, 3, 2, 2])
    status = c1.multiselect("Status", STATUSES, key="runs_status", format_func=lambda s: f"{STATUS_ICONS[s]} {s}",
                            help="waiting: running runs that wait for their GPUs; running lists those too.")
    method = c2.multiselect("Method", list(style.names), key="runs_method", format_func=style.label)
    tag = c3.text_input("Tag", key="runs_tag", placeholder="e.g. demo")
    names = {sw["id"]: sw["name"] for sw in ui.sweeps_page(ui.api_url(), ui.api_token(), limit=SWEEPS_LISTED)["data"]}
    sweep = c4.selectbox("Sweep", [None, *names], key="runs_sweep", format_func=lambda i: sweep_label(i, names),
                         help="Only the runs of one sweep.")
    return {"status": tuple(status), "method": tuple(method), "tag": tag.strip(), "sweep_id": sweep,
            "owner": who["user"] if (mine and who) else None}


def latest_of(runs: list[dict]) -> dict[int, dict]:
    """{run id: tables.run_summary} from one read per run, cached until the run has a new step."""
    url, token = ui.api_url(), ui.api_token()
    return {r["id"]: tables.run_summary(ui.metrics(url, token, r["id"], tables.LATEST_KEYS, STEP_POINTS, ui.version(r)))
            for r in runs if r["current_step"] > 0}


def styled(df, style: MethodStyle):
    colors = {style.label(m): style.color(m) for m in style.names}
    return df.style.map(lambda v: f"color: {colors.get(v, OTHER_COLOR)}; font-weight: 600", subset=["method"]).map(
        lambda v: "color: #C62828" if str(v).startswith("failed") else "", subset=["status"])


def table(f: dict, style: MethodStyle) -> list[dict]:
    page = ui.runs_page(ui.api_url(), ui.api_token(), **f)
    runs = page["data"]
    if not runs:
        if any(f.values()):
            st.info("No runs match these filters.", icon=":material/filter_alt_off:")
        else:
            st.info("**No runs yet.** Launch one: the tiny preset trains in seconds per step.", icon=":material/lightbulb:")
            st.page_link(ui.PAGES["launch"], label="Launch a run", icon=":material/rocket_launch:")
        return runs
    df = tables.runs_frame(runs, latest_of(runs), style)
    df = tables.drop_empty(df, ("tags", "sweep", "waits for", "message"))  # keep the table narrow
    st.dataframe(styled(df, style), column_config=COLUMNS, hide_index=True, key="runs_table", placeholder="–")
    more = f" (newest {len(runs)} shown)" if page["count"] > len(runs) else ""
    live = sum(ui.is_live(r) for r in runs)
    st.caption(f"{page['count']} run(s){more}" + (f" · {live} queued or running: this table refreshes every 3 s" if live else ""))
    return runs


def actions(runs: list[dict], style: MethodStyle) -> None:
    st.subheader("Act on runs")
    by_id = {r["id"]: r for r in runs}
    chosen = st.multiselect("Runs", list(by_id), format_func=lambda i: tables.run_label(by_id[i], style), key="runs_chosen",
                            placeholder="Choose one or more runs")
    c1, c2, c3, _ = st.columns([1, 1, 1, 3], vertical_alignment="center")
    with c1:
        if len(chosen) == 1:
            ui.run_link(chosen[0], "Open")
        else:
            st.caption("Choose one run to open it.")
    if c2.button("Compare", disabled=len(chosen) < 1, icon=":material/compare_arrows:", key="runs_compare"):
        st.switch_page(ui.PAGES["compare"], query_params={"runs": ",".join(map(str, chosen))})
    mine = [i for i in chosen if ui.may_change(by_id[i])]  # the runs this token may change
    if note := ui.access_note():
        st.caption(note)
    if not any(ui.may_change(r) for r in runs):
        return  # nothing here the token may cancel or delete: no such buttons
    if c3.button("Cancel", disabled=not any(ui.is_live(by_id[i]) for i in mine), icon=":material/stop_circle:", key="runs_cancel"):
        done = [i for i in mine if ui.is_live(by_id[i])]
        for i in done:
            ui.client().cancel_run(i)
        ui.clear_caches()
        st.toast(f"Cancel requested for run(s) {', '.join(map(str, done))}: a running run stops within one step.")
    with st.container(horizontal=True, vertical_alignment="center"):
        confirm = st.checkbox("Confirm deletion (metrics and evals are deleted too)", key="runs_confirm_delete")
        finished = [i for i in mine if not ui.is_live(by_id[i])]
        if st.button("Delete", disabled=not (confirm and finished), type="primary", icon=":material/delete:", key="runs_delete"):
            for i in finished:
                ui.client().delete_run(i)
            ui.clear_caches()
            st.session_state.pop("runs_chosen", None)
            st.toast(f"Deleted run(s) {', '.join(map(str, finished))}.")
            st.rerun()
        if chosen and not finished:
            st.caption("Only finished runs can be deleted: cancel a queued or running run first.")


@ui.guarded
def main() -> None:
    style = ui.method_style()
    f = filters(style)
    runs = ui.runs_page(ui.api_url(), ui.api_token(), **f)["data"]
    interval = 3 if any(ui.is_live(r) for r in runs) else None

    @st.fragment(run_every=interval)
    @ui.guarded
    def live_table() -> None:
        table(f, style)

    live_table()
    if runs:
        try:
            actions(runs, style)
        except ApiError as e:
            ui.show_error(e, "change the run")


main()
