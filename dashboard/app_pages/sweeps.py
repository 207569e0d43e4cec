"""Sweeps: the progress of each sweep (runs per status, overall progress) and a link to compare
its runs."""

import streamlit as st

from dashboard import tables, ui
from dashboard.method_style import MethodStyle

st.title("Sweeps")
st.caption("A sweep is a grid of runs (methods x seeds x overrides) submitted together, e.g. the ablation ladder "
           "GRPO → AERO S1 → AERO S1+S2 → AERO behind the measured savings waterfall.")
SHOWN = 20  # newest sweeps drawn


def sweep_card(sw: dict, style: MethodStyle) -> None:
    counts = {k: v for k, v in sw["status_counts"].items() if v}
    runs = sw["runs"]
    with st.container(border=True):
        c1, c2 = st.columns([3, 2])
        c1.markdown(f"**Sweep #{sw['id']} · {ui.md(sw['name'])}** — {len(runs)} run(s), created {str(sw['created_at'])[:16].replace('T', ' ')}")
        c1.html("".join(ui.method_chip(m, style) for m in dict.fromkeys(r["method"] for r in runs)))
        c2.progress(tables.sweep_progress(sw), text=" · ".join(f"{n} {s}" for s, n in counts.items()) or "no runs")
        failed = [r for r in runs if r["status"] == "failed"]
        if failed:
            st.warning(f"{len(failed)} run(s) failed: " + "; ".join(f"#{r['id']}: {ui.md(tables.last_line(r.get('error'))[:100])}" for r in failed))
        l1, l2 = st.columns(2)
        with l1:
            st.page_link(ui.PAGES["compare"], label="Compare its runs", query_params={"sweep": str(sw["id"])},
                         icon=":material/compare_arrows:")
        with l2:
            with st.popover("Runs", icon=":material/list:"):
                for r in runs:
                    ui.run_link(r["id"], f"#{r['id']} {r['name']} — {r['status']} {r['current_step']}/{r['total_steps']}")


@ui.guarded
def main() -> None:
    url, token, style = ui.api_url(), ui.api_token(), ui.method_style()
    page = ui.sweeps_page(url, token, limit=SHOWN)
    ids = [sw["id"] for sw in page["data"]]
    if not ids:
        st.info("**No sweeps yet.** On the Launch page choose *Sweep*, pick several methods and/or seeds, and launch: "
                "the sweep appears here with its progress.", icon=":material/lightbulb:")
        st.page_link(ui.PAGES["launch"], label="Launch a sweep", icon=":material/rocket_launch:")
        return
    live = any(sw["status_counts"].get(st_, 0) for sw in page["data"] for st_ in ("queued", "running"))

    @st.fragment(run_every=3 if live else None)
    @ui.guarded
    def cards() -> None:
        for sid in ids:
            sweep_card(ui.sweep(url, token, sid), style)
        if page["count"] > SHOWN:
            st.caption(f"{page['count'] - SHOWN} older sweep(s) not shown.")

    cards()


main()
