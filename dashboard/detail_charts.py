"""Figure builders for Run detail's step detail: any logged key as a curve, the system metrics,
and the per-step histograms as heatmaps. Pure functions over the API's plain data (no
Streamlit, no HTTP), like dashboard/run_charts.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from dashboard.method_style import DASHES, MethodStyle
from dashboard.plotting import Curve, integer_steps, lines_figure

SYSTEM_KEYS = {  # key -> (panel title, y axis)
    "system/cpu_percent": ("CPU, training process", "% of one core"),
    "system/rss_mb": ("Resident memory, training process", "MiB"),
    "system/gpu_util_percent": ("GPU utilisation (mean over the run's GPUs)", "%"),
    "system/gpu_mem_used_mb": ("GPU memory used (the run's GPUs)", "MiB"),
}
HISTOGRAM_TITLES = {"pass_rate": ("Per-prompt pass rate", "pass rate (correct / rollouts)"),
                    "length": ("Response length", "response tokens")}


def key_figure(steps: Sequence[int], series: Mapping[str, Sequence[float | None]], keys: Sequence[str], method: str, *,
               style: MethodStyle, title: str = "Chosen metrics") -> go.Figure:
    """Each chosen key as its own curve over steps, in the run's method colour (one axis; the
    legend names the key, each key its own dash)."""
    curves = [Curve(k, method, list(steps), list(series.get(k) or [None] * len(steps)), dash=DASHES[i % len(DASHES)])
              for i, k in enumerate(keys)]
    fig = lines_figure(curves, style=style, title=title, x_title="step", y_title="value")
    fig.update_layout(showlegend=True)  # the legend names the key, even for one curve
    return fig


def system_figures(steps: Sequence[int], series: Mapping[str, Sequence[float | None]], method: str, *,
                   style: MethodStyle) -> list[go.Figure]:
    """One small figure per system/* key the run logged (a run without a GPU has no GPU panels)."""
    out = []
    for key, (title, unit) in SYSTEM_KEYS.items():
        ys = series.get(key)
        if ys and any(v is not None for v in ys):
            out.append(lines_figure([Curve(key, method, list(steps), list(ys))], style=style, title=title, x_title="step",
                                    y_title=unit, height=260))
    return out


def bin_labels(lo: float, hi: float, bins: int, integer: bool) -> list[str]:
    """'[a, b)' per bin, the last closed."""
    w = (hi - lo) / bins
    fmt = (lambda v: f"{v:.0f}") if integer else (lambda v: f"{v:.1f}")
    return [f"[{fmt(lo + i * w)}, {fmt(lo + (i + 1) * w)}{']' if i == bins - 1 else ')'}" for i in range(bins)]


def heatmap_figure(steps: Sequence[int], hist: Mapping, name: str) -> go.Figure:
    """A histogram per step as a heatmap: x = step, y = bin, colour = share of the step's count
    (rows sum to 1 per step, so steps with more prompts do not dominate); hover shows the count."""
    title, y_title = HISTOGRAM_TITLES.get(name, (name, "bin"))
    counts = [list(c) for c in hist["counts"]]
    totals = [sum(c) or 1 for c in counts]
    labels = bin_labels(float(hist["lo"]), float(hist["hi"]), int(hist["bins"]), integer=name == "length")
    z = [[counts[s][b] / totals[s] for s in range(len(steps))] for b in range(int(hist["bins"]))]
    text = [[str(counts[s][b]) for s in range(len(steps))] for b in range(int(hist["bins"]))]
    fig = go.Figure(go.Heatmap(x=list(steps), y=labels, z=z, text=text, colorscale="Blues", zmin=0, zmax=1,
                               colorbar={"title": "share", "tickformat": ".0%"},
                               hovertemplate="step %{x}<br>%{y}: %{text} (%{z:.0%})<extra></extra>"))
    fig.update_layout(title={"text": title, "x": 0.01, "xanchor": "left", "font": {"size": 15}}, height=320,
                      margin={"l": 110, "r": 20, "t": 50, "b": 40}, template="plotly_white", hovermode="closest")
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text=y_title)
    return integer_steps(fig, list(steps))
