"""Run detail's sections beyond its fixed curves: a key picker over every key the run logged
(GET /api/runs/{id}/metrics/keys), its system metrics, and the per-step histograms of
per-prompt pass rate and response length as heatmaps (GET /api/runs/{id}/histograms)."""

from __future__ import annotations

import streamlit as st

from dashboard import detail_charts, ui
from dashboard.method_style import MethodStyle

MAX_POINTS = 600
MAX_PICKED = 8


def key_picker(run: dict, style: MethodStyle) -> None:
    st.subheader("Any metric")
    url, token, version = ui.api_url(), ui.api_token(), ui.version(run)
    keys = ui.metric_keys(url, token, run["id"], version)
    if not keys:
        st.caption("No metric logged yet.")
        return
    picked = st.multiselect("Metric keys", keys, default=[], max_selections=MAX_PICKED, key="detail_keys",
                            help="Every key this run logged (docs/metrics.md explains each); pick up to "
                                 f"{MAX_PICKED} to plot them over steps.")
    system = tuple(k for k in detail_charts.SYSTEM_KEYS if k in keys)
    m = ui.metrics(url, token, run["id"], tuple(dict.fromkeys((*picked, *system))), MAX_POINTS, version) if picked or system else None
    if picked and m is not None:
        ui.plot(detail_charts.key_figure(m["steps"], m["series"], picked, run["method"], style=style))
    if system and m is not None:
        st.subheader("System")
        figs = detail_charts.system_figures(m["steps"], m["series"], run["method"], style=style)
        for i in range(0, len(figs), 2):
            for col, fig in zip(st.columns(2), figs[i:i + 2]):
                with col:
                    ui.plot(fig)


def heatmaps(run: dict) -> None:
    body = ui.histograms(ui.api_url(), ui.api_token(), run["id"], ui.version(run))
    if not body["steps"]:
        return
    st.subheader("Distributions")
    st.caption("Each column is one step's histogram (fixed bins), coloured by the share of the step's prompts "
               "(pass rate) or rollouts (length) in each bin.")
    hists = body["histograms"]
    cols = st.columns(2)
    for col, name in zip(cols, [n for n in ("pass_rate", "length") if n in hists]):
        with col:
            ui.plot(detail_charts.heatmap_figure(body["steps"], hists[name], name))
