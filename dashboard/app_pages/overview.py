"""Overview: what AERO Lab is, whether the platform is up, and where to go next."""

import streamlit as st

from common.fmt import pct
from dashboard import tables, ui
from dashboard.client import ApiError

st.title("AERO Lab")
st.markdown(
    "Train small language models with reinforcement learning from verifiable rewards and see what "
    "**AERO** ([arXiv 2602.14338](https://arxiv.org/abs/2602.14338)) saves against **GRPO** and **DAPO**: "
    "AERO explores with fewer rollouts per prompt, *rescues* prompts nobody solved (S1), gives all-fail and "
    "all-correct groups a Bayesian baseline instead of a zero advantage (S2), and trains on a 1:k mix of correct "
    "and incorrect answers (S3)."
)


@ui.guarded
def status() -> None:
    try:
        h = ui.health(ui.api_url())
    except ApiError as e:
        ui.show_error(e)
        return
    runs = ui.runs_page(ui.api_url(), ui.api_token(), limit=500)
    counts = tables.status_counts(runs["data"])
    cols = st.columns(5)
    for col, (label, key) in zip(cols, (("Running", "running"), ("Queued", "queued"), ("Succeeded", "succeeded"),
                                        ("Failed", "failed"), ("Cancelled", "cancelled"))):
        col.metric(label, counts.get(key, 0))
    st.caption(f"API {ui.api_url()} · store: {h['database']} · queue: {h['broker']}")
    if runs["count"] == 0:
        st.info("**No runs yet.** Launch your first run: the *tiny* preset (a ~1M-parameter model on synthetic "
                "arithmetic) trains a step in a few seconds on a laptop CPU. Launch GRPO, AERO and its ablations as a "
                "sweep to see the savings waterfall on the Compare page.", icon=":material/lightbulb:")
        st.page_link(ui.PAGES["launch"], label="Launch a run", icon=":material/rocket_launch:")
        return
    st.subheader("Latest runs")
    style = ui.method_style()
    latest = tables.latest_runs(runs["data"])
    for r in latest:
        c1, c2, c3 = st.columns([4, 2, 2], vertical_alignment="center")
        with c1:
            ui.run_link(r["id"], f"#{r['id']} {r['name']}")
        c2.html(ui.method_chip(r["method"], style))
        c3.html(ui.progress_bar(r["progress"], r["method"], style,
                                f"{tables.status_text(r)} · {r['current_step']}/{r['total_steps']} · {pct(r['progress'] or 0.0)}"))
    running = counts.get("running", 0)
    if running > sum(r["status"] == "running" for r in latest):
        st.caption(f"{running} runs are training; the Runs page lists them all.")
    elif running:
        st.caption("Running runs first, then the newest.")


status()

st.subheader("Where to go")
c1, c2, c3 = st.columns(3)
with c1:
    st.page_link(ui.PAGES["launch"], label="**Launch** a run or a sweep", icon=":material/rocket_launch:")
    st.caption("Pick a method; every hyperparameter starts at the paper's default, with a help text.")
with c2:
    st.page_link(ui.PAGES["runs"], label="**Runs**: watch training live", icon=":material/list:")
    st.caption("Status, progress, latest reward; open a run for live curves, evals and its config.")
with c3:
    st.page_link(ui.PAGES["compare"], label="**Compare** methods", icon=":material/compare_arrows:")
    st.caption("Overlaid curves, the savings waterfall (paper Fig. 8), zero-accuracy (Fig. 9), a Table 1.")
