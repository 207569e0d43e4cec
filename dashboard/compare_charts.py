"""The Compare page's multi-run figures: seed-group bands (a mean line over a shaded CI band
across seeds), the paper's headline (held-out accuracy against training compute) and the
zero-accuracy charts (paper Fig. 9), per run or per seed group. Each group or run is drawn in
its method's colour from ``style``, and curves of one chart differ by dash
(``MethodStyle.dash_by_method``) so coinciding curves stay visible. Pure functions, no
Streamlit and no HTTP."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from common.fmt import MISSING, pct
from dashboard.method_style import MethodStyle
from dashboard.plotting import integer_steps, layout, rgba, steady_y, subtitled


@dataclass(frozen=True)
class Band:
    """One seed group's curve: the mean over its runs at ``x[i]`` with a CI band [lo, hi]
    (None where fewer than 2 runs cover the point) and ``n[i]`` runs averaged there."""

    label: str
    method: str
    x: Sequence[float | None]
    mean: Sequence[float | None]
    lo: Sequence[float | None]
    hi: Sequence[float | None]
    n: Sequence[int | None]
    dash: str = "solid"


def band_polygon(x: Sequence[float | None], lo: Sequence[float | None], hi: Sequence[float | None]) -> tuple[list, list]:
    """Outline of the band for a ``fill='toself'`` trace: along ``hi`` left to right, back along
    ``lo``, one closed shape per stretch where x, lo and hi are all present; stretches are
    separated by None (Plotly closes and fills each one on its own)."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    run: list[int] = []

    def close() -> None:
        if not run:
            return
        if xs:
            xs.append(None)
            ys.append(None)
        xs.extend([x[i] for i in run] + [x[i] for i in reversed(run)])
        ys.extend([hi[i] for i in run] + [lo[i] for i in reversed(run)])
        run.clear()

    for i in range(len(x)):
        if x[i] is not None and lo[i] is not None and hi[i] is not None:
            run.append(i)
        else:
            close()
    close()
    return xs, ys


def clipped(values: Sequence[float | None], bounds: tuple[float, float] | None) -> list[float | None]:
    """Values limited to ``bounds`` (None = unchanged; gaps stay gaps)."""
    if bounds is None:
        return list(values)
    return [None if v is None else min(bounds[1], max(bounds[0], v)) for v in values]


def _band_traces(b: Band, style: MethodStyle, *, name: str | None = None, width: float = 2.0, alpha: float = 0.18,
                 value_format: str = ".3f", level: int = 95, clip: tuple[float, float] | None = None) -> list[go.Scatter]:
    """The shaded band (no legend entry, no hover) and the mean line (hover: mean, CI, n seeds).
    ``clip``: the metric's possible range; the drawn band stops there (a t interval over two
    seeds easily reaches below 0 or above 1), the hover keeps the interval as computed."""
    color = style.color(b.method)
    name = name or b.label
    traces = []
    px, py = band_polygon(b.x, clipped(b.lo, clip), clipped(b.hi, clip))
    if px:
        traces.append(go.Scatter(x=px, y=py, fill="toself", fillcolor=rgba(color, alpha), mode="lines",
                                 line={"width": 0, "color": rgba(color, 0)}, hoverinfo="skip", showlegend=False,
                                 legendgroup=b.label, name=f"{name} band"))
    ci = [MISSING if lo is None or hi is None else f"[{lo:{value_format}}, {hi:{value_format}}]" for lo, hi in zip(b.lo, b.hi)]
    traces.append(go.Scatter(
        x=list(b.x), y=list(b.mean), name=name, mode="lines", legendgroup=b.label, connectgaps=True,
        line={"color": color, "dash": b.dash, "width": width},
        customdata=[[c, MISSING if n is None else n] for c, n in zip(ci, b.n)],
        hovertemplate=f"{b.label}: %{{y:{value_format}}} · {level}% CI %{{customdata[0]}} · n=%{{customdata[1]}} seeds<extra></extra>",
    ))
    return traces


def band_figure(bands: Sequence[Band], *, style: MethodStyle, title: str, x_title: str, y_title: str,
                y_tickformat: str | None = None, y_range: Sequence[float] | None = None, height: int = 360, level: int = 95,
                clip: tuple[float, float] | None = None, counts: bool = False) -> go.Figure:
    """Seed groups: per group the mean line in its method's colour over a shaded CI band in
    the same colour, see-through; the legend names groups (groups of one method differ by dash).
    Works on any x (step, cumulative FLOPs, wall time): the API puts each group on its own grid.
    ``clip``: the metric's possible range (e.g. (0, 1) for a ratio), where bands stop; ``counts``:
    y counts things (see :func:`~dashboard.plotting.steady_y`)."""
    fig = go.Figure()
    for b in bands:
        for tr in _band_traces(b, style, value_format=".1%" if y_tickformat == ".0%" else ".3g", level=level, clip=clip):
            fig.add_trace(tr)
    fig = layout(fig, f"{title} <span style='font-size:12px;color:#666'>(band: {level}% CI across seeds)</span>", x_title, y_title,
                 height=height, y_tickformat=y_tickformat, y_range=y_range)
    if y_range is None:
        steady_y(fig, [v for b in bands for v in (*b.mean, *clipped(b.lo, clip), *clipped(b.hi, clip))], counts=counts)
    return integer_steps(fig, [v for b in bands for v in b.x]) if x_title == "step" else fig


def zero_acc_band_figure(groups: Sequence[tuple[Band, Band | None]], *, style: MethodStyle, x_title: str = "step",
                         level: int = 95) -> go.Figure:
    """Paper Figure 9 for seed groups. ``groups``: (after-rescue band, after-explore band or
    None); line + band = after rescue (what the update sees), thin dotted = the after-explore
    mean (its band is left out to keep the chart readable). The legend gives each group's
    mean over its grid."""
    fig = go.Figure()
    for band, explore in groups:
        vals = [v for v in band.mean if v is not None]
        mean = f" (mean {pct(sum(vals) / len(vals))})" if vals else ""
        for tr in _band_traces(band, style, name=f"{band.label}{mean}", value_format=".1%", level=level, clip=(0.0, 1.0)):
            fig.add_trace(tr)
        if explore is not None and (list(explore.x) != list(band.x) or any(a != b for a, b in zip(explore.mean, band.mean))):
            fig.add_trace(go.Scatter(x=list(explore.x), y=list(explore.mean), name=f"{band.label}: after explore", mode="lines",
                                     legendgroup=band.label, showlegend=False, connectgaps=True,
                                     hovertemplate=f"{band.label} after explore: %{{y:.1%}}<extra></extra>",
                                     line={"color": style.color(band.method), "width": 1, "dash": "dot"}))
    fig = layout(fig, f"Zero-accuracy ratio (line + band: after rescue, {level}% CI across seeds; dotted: after exploration)", x_title,
                 "fraction of prompts with no correct rollout", y_tickformat=".0%", height=380)
    return integer_steps(fig, [v for g in groups for v in g[0].x]) if x_title == "step" else fig


def zero_acc_compare_figure(runs: Sequence[tuple[str, str, Sequence[float], Sequence[float | None], Sequence[float | None]]],
                            *, style: MethodStyle, x_title: str = "step") -> go.Figure:
    """Paper Figure 9: zero-accuracy ratio per method over training. ``runs``: (label, method, x,
    after_explore, after_rescue); solid = after rescue (what the update sees), dotted = after
    explore. The legend gives each run's mean over steps. Each run's solid-or-dashed line takes
    its dash from ``style.dash_by_method``, like every multi-run chart, so two runs with the same
    ratios (GRPO and DAPO explore alike) both stay visible."""
    fig = go.Figure()
    for (label, method, x, explore, rescue), dash in zip(runs, style.dash_by_method([r[1] for r in runs])):
        vals = [v for v in rescue if v is not None]
        mean = f" (mean {pct(sum(vals) / len(vals))})" if vals else ""
        fig.add_trace(go.Scatter(x=list(x), y=list(rescue), name=f"{label}{mean}", mode="lines", legendgroup=label,
                                 line={"color": style.color(method), "width": 2, "dash": dash}, connectgaps=True))
        if any(a != b for a, b in zip(explore, rescue)):
            fig.add_trace(go.Scatter(x=list(x), y=list(explore), name=f"{label}: after explore", mode="lines",
                                     legendgroup=label, showlegend=False, connectgaps=True,
                                     line={"color": style.color(method), "width": 1, "dash": "dot"}))
    fig = layout(fig, "Zero-accuracy ratio (lines: after rescue, thin dotted: after exploration)", x_title,
                 "fraction of prompts with no correct rollout", y_tickformat=".0%", height=380)
    return integer_steps(fig, [v for r in runs for v in r[2]]) if x_title == "step" else fig


def headline_figure(bands: Sequence[Band], *, style: MethodStyle, title: str, x_title: str, y_title: str, level: int = 95,
                    targets: Sequence[tuple[float, str]] = (), x_tickformat: str | None = None, seeds: bool = True,
                    height: int = 400) -> go.Figure:
    """The paper's headline (its Fig. 1): held-out accuracy against training compute, one line
    per method (per seed group: the mean over seeds over a CI band; per run: the run alone).
    ``targets``: (accuracy, label) drawn as dotted horizontal lines, the accuracies the
    compute-to-reach table measures, so where a line crosses one is where it reached it."""
    fig = go.Figure()
    for b in bands:
        for tr in _band_traces(b, style, value_format=".3f", level=level, clip=(0.0, 1.0)):
            if tr.fill != "toself":
                tr.mode, tr.marker = "lines+markers", {"size": 5}
                if not seeds:  # one run per line: no interval to speak of in the hover
                    tr.hovertemplate = f"{b.label}: %{{y:.3f}}<extra></extra>"
            fig.add_trace(tr)
    for y, label in targets:
        fig.add_hline(y=y, line={"color": "#9A9A9A", "dash": "dot", "width": 1}, annotation_text=label,
                      annotation_position="top left", annotation_font={"size": 10, "color": "#777"})
    note = f"band: {level}% CI across seeds" if seeds and any(v is not None for b in bands for v in b.lo) else ""
    fig = layout(fig, subtitled(title, note), x_title, y_title, height=height)
    fig.update_xaxes(tickformat=x_tickformat, rangemode="tozero")
    return fig
