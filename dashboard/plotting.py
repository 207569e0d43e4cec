"""The shared plotting primitives of every figure builder: layout (title, legend, units),
readable axes for steps, counts and flat series, see-through colours, the generic line, stacked
area and table figures. Pure functions over plain data, no Streamlit and no HTTP.

A method's curves are drawn in its colour from the :class:`~dashboard.method_style.MethodStyle`
the caller passes; every axis names its unit; percentages read like 86.7% (common/fmt.py ``pct``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from dashboard.method_style import OTHER_COLOR, MethodStyle

STEADY_SPREAD = 0.01  # a series whose spread is under 1% of its size is drawn from 0 (see steady_y)

Series = Mapping[str, Sequence[float | None]]  # metric key -> values aligned with steps


@dataclass(frozen=True)
class Curve:
    """One line: ``y[i]`` at ``x[i]`` (None = gap), drawn in its method's colour."""

    name: str
    method: str
    x: Sequence[float]
    y: Sequence[float | None]
    dash: str = "solid"
    legendgroup: str | None = None
    width: float = 2.0
    alpha: float = 1.0  # < 1: a see-through line (see UNDERLAY)


# The second series of one run (rollouts generated vs trained, zero-accuracy after exploration vs
# after rescue, reward of trained vs generated rollouts) is in the run's colour too, and often
# equals the first (GRPO trains every rollout it generates and rescues nothing): a dashed line
# under a solid one of the same colour then vanishes. Drawn as a wide see-through band instead,
# it stays visible around the thin line wherever the two coincide.
UNDERLAY = {"width": 7.0, "alpha": 0.3}


def rgba(hex_color: str, alpha: float) -> str:
    """'#4C78A8', 0.2 -> 'rgba(76,120,168,0.2)' (bands are the method colour, see-through)."""
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def subtitled(title: str, subtitle: str) -> str:
    """A chart title with a smaller grey note after it (what the curve measures)."""
    return f"{title} <span style='font-size:11px;color:#666'>({subtitle})</span>" if subtitle else title


def layout(fig: go.Figure, title: str, x_title: str, y_title: str, *, height: int = 320,
           y_tickformat: str | None = None, y_range: Sequence[float] | None = None) -> go.Figure:
    """The one layout: title on the first line, legend on the second (above the plot), so neither
    hides the other; axis titles; percent axes hover in the one format (pct)."""
    fig.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left", "y": 0.98, "yanchor": "top", "yref": "container", "font": {"size": 15}},
        height=height, margin={"l": 60, "r": 20, "t": 72, "b": 40},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.01, "xanchor": "left", "x": 0, "font": {"size": 11}},
        hovermode="x unified", template="plotly_white",
    )
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title, tickformat=y_tickformat, range=y_range)
    if y_tickformat and y_tickformat.endswith("%"):  # ticks 0%, 10%, ...; hovers in the one format (pct)
        fig.update_yaxes(hoverformat=".1%")
    return fig


def integer_steps(fig: go.Figure, x: Sequence[float | None]) -> go.Figure:
    """Steps are whole numbers: on a short run tick every step instead of 1.5, 2.5, ..."""
    xs = [v for v in x if v is not None]
    if xs and max(xs) - min(xs) <= 12:
        fig.update_xaxes(tick0=min(xs), dtick=1)
    else:
        fig.update_xaxes(tickformat="d")
    return fig


def steady_y(fig: go.Figure, values: Sequence[float | None], *, counts: bool = False, **where) -> go.Figure:
    """A sensible y axis for flat series and counts. Plotly zooms onto a constant series (a flat
    1024 on a 1023-1025 axis ticked 1,024.5), which reads as noise: a series whose spread is
    under :data:`STEADY_SPREAD` of its size is drawn from 0 to 10% above it. Counts (rollouts,
    prompts, tokens) also start at 0 and get whole-number ticks. ``where``: row/col of a subplot."""
    ys = [v for v in values if v is not None and math.isfinite(v)]
    if not ys:
        return fig
    lo, hi = min(ys), max(ys)
    if hi - lo <= STEADY_SPREAD * max(abs(lo), abs(hi)):
        if hi == lo == 0:
            fig.update_yaxes(range=[0, 1], **where)
        elif lo >= 0:
            fig.update_yaxes(range=[0, hi * 1.1], **where)
        elif hi <= 0:
            fig.update_yaxes(range=[lo * 1.1, 0], **where)
    elif counts:
        fig.update_yaxes(rangemode="tozero", **where)
    if counts:
        if hi <= 10:
            fig.update_yaxes(tick0=0, dtick=1, **where)  # 0, 1, 2, ...: never half a rollout
        elif not fig.layout.yaxis.tickformat:
            fig.update_yaxes(tickformat=",d", **where)
    return fig


def column(series: Series, key: str, n: int) -> list[float | None]:
    """``series[key]`` as a list, or ``n`` gaps when the key was not logged."""
    vals = series.get(key)
    return list(vals) if vals is not None else [None] * n


def has_any(series: Series, *keys: str) -> bool:
    """True when at least one of ``keys`` has a non-null value."""
    return any(v is not None for k in keys for v in series.get(k) or ())


def lines_figure(curves: Sequence[Curve], *, style: MethodStyle, title: str, x_title: str, y_title: str,
                 y_tickformat: str | None = None, y_range: Sequence[float] | None = None, height: int = 340,
                 counts: bool = False) -> go.Figure:
    """Overlaid curves, each in its method's colour (``style``). ``counts``: y counts things (from
    0, whole ticks); without ``y_range`` a flat series gets a readable axis (:func:`steady_y`)."""
    fig = go.Figure()
    for c in curves:
        color = style.color(c.method) if c.alpha >= 1 else rgba(style.color(c.method), c.alpha)
        fig.add_trace(go.Scatter(x=list(c.x), y=list(c.y), name=c.name, mode="lines",
                                 line={"color": color, "dash": c.dash, "width": c.width},
                                 legendgroup=c.legendgroup, connectgaps=True))
    fig = layout(fig, title, x_title, y_title, height=height, y_tickformat=y_tickformat, y_range=y_range)
    if y_range is None:
        steady_y(fig, [v for c in curves for v in c.y], counts=counts)
    return integer_steps(fig, [v for c in curves for v in c.x]) if x_title == "step" else fig


def stacked_area_figure(x: Sequence[float], layers: Mapping[str, Sequence[float | None]], colors: Mapping[str, str], *,
                        title: str, x_title: str, y_title: str, height: int = 320, counts: bool = False) -> go.Figure:
    """Layers stacked bottom-up in the mapping's order (``counts``: whole-number ticks)."""
    fig = go.Figure()
    for name, ys in layers.items():
        fig.add_trace(go.Scatter(x=list(x), y=[0 if v is None else v for v in ys], name=name, mode="lines",
                                 stackgroup="one", line={"width": 0.5, "color": colors.get(name, OTHER_COLOR)}))
    fig = layout(fig, title, x_title, y_title, height=height)
    tops = [sum(v or 0 for v in vals) for vals in zip(*layers.values())] if layers else []
    steady_y(fig, tops, counts=counts)
    return integer_steps(fig, x) if x_title == "step" else fig


def table_figure(columns: Sequence[str], rows: Sequence[Sequence[str]], bold: Sequence[Sequence[bool]], *,
                 title: str = "", col_widths: Sequence[float] | None = None) -> go.Figure:
    """A plain table (cells may contain <br>), with the flagged cells in bold. The figure is as
    tall as its rows: each row as many text lines as its fullest cell (at least 2)."""
    cells = [[f"<b>{rows[r][c]}</b>" if bold[r][c] else rows[r][c] for r in range(len(rows))] for c in range(len(columns))]
    header_lines = max([1] + [c.count("<br>") + 1 for c in columns])
    row_lines = [max([2] + [str(cell).count("<br>") + 1 for cell in row]) for row in rows] or [2]
    fig = go.Figure(go.Table(
        columnwidth=list(col_widths) if col_widths else None,
        header={"values": [f"<b>{c}</b>" for c in columns], "fill_color": "#EEF1F5", "align": "left", "font": {"size": 12}},
        cells={"values": cells, "align": "left", "height": 36, "font": {"size": 12}, "fill_color": "white",
               "line_color": "#E3E6EA"},
    ))
    fig.update_layout(title={"text": title, "x": 0, "font": {"size": 15}}, margin={"l": 0, "r": 0, "t": 40 if title else 0, "b": 0},
                      height=(40 if title else 0) + 27 + 18 * header_lines + sum(12 + 18 * n for n in row_lines))
    return fig
