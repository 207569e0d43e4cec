"""Plotly figure builders: pure functions over plain data (lists and dicts as the API returns
them), no Streamlit and no HTTP, so tests can call them directly.

One colour per method on every page (:data:`METHOD_COLORS`); a run's curves use its method's
colour and every curve of a multi-run chart its own dash (:func:`dash_by_method`), so curves
that coincide stay visible. Every axis names its unit; percentages read like 86.7% (:func:`pct`).
Metric keys are those of docs/metrics.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

import common.metric_keys as mk

# Per method, from the API's method specs (GET /api/methods, :func:`use_methods`; the app loads
# them once per session through dashboard/ui.py). Filled in place so every importer sees them;
# before they are loaded a method is drawn grey under its own name.
METHOD_COLORS: dict[str, str] = {}
METHOD_LABELS: dict[str, str] = {}
METHOD_RESCUES: dict[str, bool] = {}  # S1 (rescue rounds) on, from the spec's strategies
BASELINE: list[str] = ["grpo"]  # the baseline method's name (the spec with ``baseline``), set by use_methods
METHOD_FAMILY: dict[str, str] = {}
OTHER_COLOR = "#7F7F7F"
DASHES: tuple[str, ...] = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
# Where each method starts in DASHES: the first run (or group) of every method gets a dash of its
# own, so two methods whose curves coincide (GRPO and DAPO of one seed often do for many steps)
# show both colours, the later one dashed over the earlier, instead of the later hiding the
# earlier. "dot" is left to the after-exploration lines of the zero-accuracy charts.
METHOD_DASH_OFFSET: dict[str, int] = {}  # from the specs' ``dash``
STEADY_SPREAD = 0.01  # a series whose spread is under 1% of its size is drawn from 0 (see steady_y)
STRATA_COLORS = {"rescue": "#5B6770", "low": "#F2B447", "high": "#8FBC8F"}
PHASE_COLORS = {"rollout": "#8DA0CB", "reward": "#BDBDBD", "train": "#FC8D62"}

Series = Mapping[str, Sequence[float | None]]  # metric key -> values aligned with steps


def use_methods(specs: Sequence[Mapping]) -> None:
    """Take each method's colour, label, family and dash offset from its spec (the items of
    GET /api/methods), in the specs' order."""
    for table in (METHOD_COLORS, METHOD_LABELS, METHOD_FAMILY, METHOD_DASH_OFFSET, METHOD_RESCUES):
        table.clear()
    for spec in specs:
        name = spec["name"]
        colour = str(spec["colour"])  # drawn into inline styles: a hex colour or the fallback grey
        METHOD_COLORS[name] = colour if re.fullmatch(r"#[0-9A-Fa-f]{6}", colour) else OTHER_COLOR
        METHOD_LABELS[name] = spec["label"]
        METHOD_FAMILY[name], METHOD_DASH_OFFSET[name] = spec["family"], int(spec.get("dash", 0))
        METHOD_RESCUES[name] = bool((spec.get("strategies") or {}).get("s1"))
        if spec.get("baseline"):
            BASELINE[:] = [name]


def baseline_method() -> str:
    """The method the others are compared against (GET /api/methods ``baseline``)."""
    return BASELINE[0]


def method_color(method: str) -> str:
    return METHOD_COLORS.get(method, OTHER_COLOR)


def method_label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


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


# ---------------------------------------------------------------- formatting


def pct(fraction: float | None) -> str:
    """The dashboard's one percentage format: pct(0.3) -> '30.0%', pct(0.8667) -> '86.7%'."""
    if fraction is None or (isinstance(fraction, float) and math.isnan(fraction)):
        return "–"
    return f"{fraction:.1%}"


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """Engineering notation: si(1.23e12, "FLOP") -> '1.23 TFLOP'; si(0.5, "s") -> '0.5 s'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if value == 0:
        return f"0 {unit}".strip()
    prefixes = {12: "T", 9: "G", 6: "M", 3: "k", 0: "", 15: "P", 18: "E"}
    exp = si_exponent(value)
    return f"{value / 10 ** exp:.{digits}g} {prefixes[exp]}{unit}".strip()


def si_exponent(value: float) -> int:
    """The power of ten :func:`si` writes ``value`` in: a multiple of 3 in 0..18 (0 for 0)."""
    if not value:
        return 0
    return max(0, min(18, int(math.floor(math.log10(abs(value)) / 3) * 3)))


def _layout(fig: go.Figure, title: str, x_title: str, y_title: str, *, height: int = 320,
            y_tickformat: str | None = None, y_range: Sequence[float] | None = None) -> go.Figure:
    # Title on the first line, legend on the second (above the plot), so neither hides the other.
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


def integer_steps(fig: go.Figure, x: Sequence[float]) -> go.Figure:
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


def _col(series: Series, key: str, n: int) -> list[float | None]:
    vals = series.get(key)
    return list(vals) if vals is not None else [None] * n


def has_any(series: Series, *keys: str) -> bool:
    """True when at least one of ``keys`` has a non-null value."""
    return any(v is not None for k in keys for v in series.get(k) or ())


# ---------------------------------------------------------------- generic figures


def lines_figure(curves: Sequence[Curve], *, title: str, x_title: str, y_title: str, y_tickformat: str | None = None,
                 y_range: Sequence[float] | None = None, height: int = 340, counts: bool = False) -> go.Figure:
    """Overlaid curves, each in its method's colour. ``counts``: y counts things (from 0, whole
    ticks); without ``y_range`` a flat series gets a readable axis (:func:`steady_y`)."""
    fig = go.Figure()
    for c in curves:
        color = method_color(c.method) if c.alpha >= 1 else rgba(method_color(c.method), c.alpha)
        fig.add_trace(go.Scatter(x=list(c.x), y=list(c.y), name=c.name, mode="lines",
                                 line={"color": color, "dash": c.dash, "width": c.width},
                                 legendgroup=c.legendgroup, connectgaps=True))
    fig = _layout(fig, title, x_title, y_title, height=height, y_tickformat=y_tickformat, y_range=y_range)
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
    fig = _layout(fig, title, x_title, y_title, height=height)
    tops = [sum(v or 0 for v in vals) for vals in zip(*layers.values())] if layers else []
    steady_y(fig, tops, counts=counts)
    return integer_steps(fig, x) if x_title == "step" else fig


# ---------------------------------------------------------------- one run (Run detail page)


REWARD_NOTES: dict[str, str] = {  # what a training-reward curve measures, said on the chart
    mk.REWARD_MEAN: "mean reward of generated rollouts; AERO's include rescue rounds on unsolved prompts, so lower by "
                   "construction; not held-out accuracy",
    mk.REWARD_TRAINED_MEAN: "mean reward of trained rollouts; AERO's are the curated set (rescued groups, down-sampled "
                           "negatives); not held-out accuracy",
}


def subtitled(title: str, subtitle: str) -> str:
    """A chart title with a smaller grey note after it (what the curve measures)."""
    return f"{title} <span style='font-size:11px;color:#666'>({subtitle})</span>" if subtitle else title


def reward_figure(steps: Sequence[int], s: Series, method: str) -> go.Figure:
    """Mean verifier reward of generated rollouts, and of trained rollouts when logged: a
    training signal, not held-out accuracy. For the AERO family the generated set includes
    rescue rounds on zero-accuracy prompts (lower by construction) and the trained set is
    curated, so the legend and the title say which is which."""
    aero = METHOD_RESCUES.get(method, False)  # S1 on: the generated set includes rescue rounds
    curves = [Curve("generated rollouts" + (", incl. rescue rounds" if aero else "") + " (reward/mean)", method, steps,
                    _col(s, mk.REWARD_MEAN, len(steps)))]
    if has_any(s, mk.REWARD_TRAINED_MEAN):
        curves.append(Curve("trained rollouts" + (", curated" if aero else "") + " (reward/trained_mean)", method, steps,
                            _col(s, mk.REWARD_TRAINED_MEAN, len(steps)), **UNDERLAY))
    note = ("AERO: generated includes rescue rounds on zero-accuracy prompts; trained = the curated set"
            if aero else "mean verifier reward of this step's rollouts")
    return lines_figure(curves, title=subtitled("Training reward (not held-out accuracy)", note), x_title="step",
                        y_title="mean reward (0–1)", y_range=[0, 1.02])


def heldout_figure(steps: Sequence[int], avg: Sequence[float | None], pas: Sequence[float | None], method: str,
                   k: int | None) -> go.Figure:
    """Held-out accuracy at each evaluation (every benchmark pooled): Avg@k solid, Pass@k dashed,
    with markers (a run evaluates a handful of times)."""
    kk = k or "k"
    fig = lines_figure([Curve(f"Avg@{kk}", method, steps, avg), Curve(f"Pass@{kk}", method, steps, pas, dash="dash")],
                       title=subtitled(f"Held-out Avg@{kk} over training", "all benchmarks pooled, fixed problems"),
                       x_title="step", y_title="held-out accuracy (0–1)", y_range=[0, 1.02], height=320)
    fig.update_traces(mode="lines+markers")
    return fig


def zero_acc_figure(steps: Sequence[int], s: Series, method: str) -> go.Figure:
    """Fraction of prompts with no correct rollout, after exploration and after S1 rescue."""
    n = len(steps)
    curves = [Curve("after explore", method, steps, _col(s, mk.ZERO_ACC_AFTER_EXPLORE, n), **UNDERLAY),
              Curve("after rescue", method, steps, _col(s, mk.ZERO_ACC_AFTER_RESCUE, n))]
    return lines_figure(curves, title="Zero-accuracy ratio", x_title="step", y_title="fraction of prompts",
                        y_tickformat=".0%", y_range=[0, 1.02])


def strata_figure(steps: Sequence[int], s: Series) -> go.Figure:
    """AERO strata after exploration as a stacked area (prompts per step)."""
    n = len(steps)
    layers = {"rescue (c ≤ S)": _col(s, mk.STRATA_RESCUE, n), "low success": _col(s, mk.STRATA_LOW, n),
              "high success": _col(s, mk.STRATA_HIGH, n)}
    colors = dict(zip(layers, STRATA_COLORS.values()))
    return stacked_area_figure(steps, layers, colors, title="Prompt strata after exploration", x_title="step", y_title="prompts",
                               counts=True)


def rollouts_figure(steps: Sequence[int], s: Series, method: str) -> go.Figure:
    """Rollouts generated vs rollouts that entered the update."""
    n = len(steps)
    curves = [Curve("generated", method, steps, _col(s, mk.ROLLOUTS_GENERATED, n), **UNDERLAY),
              Curve("trained", method, steps, _col(s, mk.ROLLOUTS_TRAINED, n))]
    return lines_figure(curves, title="Rollouts per step", x_title="step", y_title="rollouts", counts=True)


def time_split_figure(steps: Sequence[int], s: Series) -> go.Figure:
    """Seconds per step split into generation, reward (verifier) and training, stacked."""
    n = len(steps)
    layers = {"rollout": _col(s, mk.ROLLOUT_S, n), "reward": _col(s, mk.REWARD_S, n), "train": _col(s, mk.TRAIN_S, n)}
    return stacked_area_figure(steps, layers, PHASE_COLORS, title="Time per step", x_title="step", y_title="seconds")


def flops_figure(steps: Sequence[int], s: Series) -> go.Figure:
    """FLOPs per step: rollout (generation) and training, stacked."""
    n = len(steps)
    layers = {"rollout": _col(s, mk.FLOPS_ROLLOUT, n), "train": _col(s, mk.FLOPS_TRAIN, n)}
    fig = stacked_area_figure(steps, layers, PHASE_COLORS, title="FLOPs per step", x_title="step", y_title="FLOPs")
    fig.update_yaxes(tickformat="~s")
    return fig


def health_figure(steps: Sequence[int], s: Series, method: str, *, kl: bool = True) -> go.Figure:
    """Gradient norm (before clipping), policy entropy (nats/token) and k3 KL, one panel each.
    ``kl=False`` (the run's kl_coef is 0): no KL panel, since the trainer neither computes nor
    applies a KL penalty then and a flat 0 would read as a measured KL of 0; the title says so."""
    panels = [(mk.TRAIN_GRAD_NORM, "grad norm"), (mk.TRAIN_ENTROPY, "entropy (nats/token)")]
    if kl:
        panels.append((mk.TRAIN_KL, "KL to reference"))
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[p[1] for p in panels], horizontal_spacing=0.08)
    for i, (key, label) in enumerate(panels, start=1):
        ys = _col(s, key, len(steps))
        fig.add_trace(go.Scatter(x=list(steps), y=ys, name=label, mode="lines",
                                 line={"color": method_color(method), "width": 2}, showlegend=False), row=1, col=i)
        fig.update_xaxes(title_text="step", row=1, col=i)
        steady_y(fig, ys, row=1, col=i)
    integer_steps(fig, steps)
    title = "Optimisation health" if kl else subtitled("Optimisation health", "KL off (kl_coef = 0): no KL panel")
    fig.update_layout(title={"text": title, "x": 0, "font": {"size": 15}}, height=300,
                      margin={"l": 50, "r": 20, "t": 70, "b": 40}, template="plotly_white")
    return fig


# ---------------------------------------------------------------- comparisons (Compare page)


def zero_acc_compare_figure(runs: Sequence[tuple[str, str, Sequence[float], Sequence[float | None], Sequence[float | None]]],
                            *, x_title: str = "step") -> go.Figure:
    """Paper Figure 9: zero-accuracy ratio per method over training. ``runs``: (label, method, x,
    after_explore, after_rescue); solid = after rescue (what the update sees), dotted = after
    explore. The legend gives each run's mean over steps. Each run's solid-or-dashed line takes
    its dash from :func:`dash_by_method`, like every multi-run chart, so two runs with the same
    ratios (GRPO and DAPO explore alike) both stay visible."""
    fig = go.Figure()
    for (label, method, x, explore, rescue), dash in zip(runs, dash_by_method([r[1] for r in runs])):
        vals = [v for v in rescue if v is not None]
        mean = f" (mean {pct(sum(vals) / len(vals))})" if vals else ""
        fig.add_trace(go.Scatter(x=list(x), y=list(rescue), name=f"{label}{mean}", mode="lines", legendgroup=label,
                                 line={"color": method_color(method), "width": 2, "dash": dash}, connectgaps=True))
        if any(a != b for a, b in zip(explore, rescue)):
            fig.add_trace(go.Scatter(x=list(x), y=list(explore), name=f"{label}: after explore", mode="lines",
                                     legendgroup=label, showlegend=False, connectgaps=True,
                                     line={"color": method_color(method), "width": 1, "dash": "dot"}))
    fig = _layout(fig, "Zero-accuracy ratio (lines: after rescue, thin dotted: after exploration)", x_title,
                  "fraction of prompts with no correct rollout", y_tickformat=".0%", height=380)
    return integer_steps(fig, [v for r in runs for v in r[2]]) if x_title == "step" else fig


WATERFALL_UNITS: dict[str, tuple[str, str]] = {  # unit -> (axis title, SI unit for labels)
    "seconds": ("training seconds per step", "s"),
    "flops": ("training FLOPs per step", "FLOP"),
    "step_seconds": ("seconds per step (whole step)", "s"),
    "total_flops": ("FLOPs per step (rollout + train)", "FLOP"),
    "rollouts": ("trained rollouts per step", ""),
    "tokens": ("trained tokens per step", ""),
}
STEP_NAMES = ("S1 early rescue", "S2 Bayesian", "S3 rejection")


COUNTERFACTUAL_GRPO = ("GRPO bar = what the AERO run trained plus the savings (counterfactual at the same rollout "
                       "budget), not the GRPO run's measured step time")


def waterfall_figure(wf: Mapping[str, float | None], unit: str, *, title: str, subtitle: str = "",
                     counterfactual: bool = False, measured_grpo: tuple[float, str] | None = None) -> go.Figure:
    """Paper Figure 8: GRPO -> -S1 -> -S2 -> -S3 = AERO. ``wf``: {baseline, s1, s2, s3, final}
    with baseline - s1 - s2 - s3 = final (a strategy the method does not use is None: drawn as
    0 and labelled "not used"). Bar labels give each saving and its share of the baseline.
    Floating bars (``base`` = where each saving ends) so GRPO and AERO keep their method colours.

    ``counterfactual``: the GRPO bar is computed (the AERO run's trained cost plus its logged
    savings), so its label and hover say so: a reader otherwise holds it against the GRPO run's
    time per step in the benchmark table and finds they disagree. ``measured_grpo``: (value,
    label) of a compared GRPO run's measured cost in the same unit, drawn as a dashed line
    beside the bars, so both numbers are on the chart."""
    axis, u = WATERFALL_UNITS.get(unit, (unit, ""))
    base = wf.get("baseline") or 0.0
    final = wf.get("final") or 0.0
    labels = ["GRPO", *STEP_NAMES, "AERO"]
    # the bar's own label says it (a two-line tick would tilt every tick of the chart)
    bottoms, heights, texts, colors = [0.0], [base], [si(base, u) + ("<br>counterfactual" if counterfactual else "")], [method_color(baseline_method())]
    level = base
    for v in (wf.get(k) for k in ("s1", "s2", "s3")):
        saved = v or 0.0
        bottoms.append(min(level, level - saved))
        heights.append(abs(saved))
        texts.append("not used" if v is None else f"−{si(v, u)}<br>({pct(v / base)})" if base else f"−{si(v, u)}")
        colors.append("#8FBC8F" if saved >= 0 else "#D62728")  # a negative saving is a cost
        level -= saved
    bottoms.append(0.0)
    heights.append(final)
    texts.append(f"{si(final, u)}<br>({pct(final / base)} of GRPO)" if base else si(final, u))
    colors.append(METHOD_COLORS["aero"])
    hover = [f"{lab}: {t.replace('<br>', ' ')}" for lab, t in zip(labels, texts)]
    if counterfactual:
        hover[0] += f"<br>{COUNTERFACTUAL_GRPO}"
    fig = go.Figure(go.Bar(x=labels, y=heights, base=bottoms, marker_color=colors, text=texts, textposition="outside",
                           textfont={"size": 12}, hovertext=hover, hoverinfo="text", cliponaxis=False))
    levels = [base]
    for k in ("s1", "s2", "s3"):
        levels.append(levels[-1] - (wf.get(k) or 0.0))
    for i, y in enumerate(levels):  # dotted connector from bar i to bar i + 1 at the running level
        fig.add_shape(type="line", x0=i - 0.4, x1=i + 1.4, y0=y, y1=y, line={"color": "#999", "dash": "dot", "width": 1})
    if measured_grpo is not None:
        value, label = measured_grpo
        fig.add_hline(y=value, line={"color": method_color(baseline_method()), "dash": "dash", "width": 1.5},
                      annotation_text=f"{label}: {si(value, u)}", annotation_position="top right",
                      annotation_font={"size": 11, "color": method_color(baseline_method())})
    full = f"{title} <span style='font-size:12px;color:#666'>({subtitle})</span>" if subtitle else title
    fig = _layout(fig, full, "", axis, height=380)
    top = max([base, final, *(b + h for b, h in zip(bottoms, heights))] + [measured_grpo[0] if measured_grpo else 0, 0])
    fig.update_layout(hovermode="closest", showlegend=False, margin={"l": 60, "r": 20, "t": 50, "b": 40},
                      uniformtext={"minsize": 11, "mode": "show"})
    fig.update_yaxes(tickformat="~s" if u != "s" else None, range=[0, top * 1.25 if top > 0 else 1])
    return fig


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


# ---------------------------------------------------------------- seed groups (Compare page, "Aggregate seeds")


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


def rgba(hex_color: str, alpha: float) -> str:
    """'#4C78A8', 0.2 -> 'rgba(76,120,168,0.2)' (bands are the method colour, see-through)."""
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def dash_by_method(methods: Sequence[str]) -> list[str]:
    """The dash of each curve of a multi-run chart (one item per run or group, in drawing order).
    Items of one method share its colour, so they differ by dash: the i-th item of a method gets
    the i-th dash after the method's own start (:data:`METHOD_DASH_OFFSET`). Two methods' i-th
    items (e.g. GRPO and DAPO of seed 0) never share a dash, so where their curves coincide the
    later one is drawn dashed over the earlier and both colours show."""
    seen: dict[str, int] = {}
    out = []
    for m in methods:
        i = seen.get(m, 0)
        out.append(DASHES[(METHOD_DASH_OFFSET.get(m, 0) + i) % len(DASHES)])
        seen[m] = i + 1
    return out


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


def _band_traces(b: Band, *, name: str | None = None, width: float = 2.0, alpha: float = 0.18,
                 value_format: str = ".3f", level: int = 95, clip: tuple[float, float] | None = None) -> list[go.Scatter]:
    """The shaded band (no legend entry, no hover) and the mean line (hover: mean, CI, n seeds).
    ``clip``: the metric's possible range; the drawn band stops there (a t interval over two
    seeds easily reaches below 0 or above 1), the hover keeps the interval as computed."""
    color = method_color(b.method)
    name = name or b.label
    traces = []
    px, py = band_polygon(b.x, clipped(b.lo, clip), clipped(b.hi, clip))
    if px:
        traces.append(go.Scatter(x=px, y=py, fill="toself", fillcolor=rgba(color, alpha), mode="lines",
                                 line={"width": 0, "color": rgba(color, 0)}, hoverinfo="skip", showlegend=False,
                                 legendgroup=b.label, name=f"{name} band"))
    ci = ["–" if lo is None or hi is None else f"[{lo:{value_format}}, {hi:{value_format}}]" for lo, hi in zip(b.lo, b.hi)]
    traces.append(go.Scatter(
        x=list(b.x), y=list(b.mean), name=name, mode="lines", legendgroup=b.label, connectgaps=True,
        line={"color": color, "dash": b.dash, "width": width},
        customdata=[[c, "–" if n is None else n] for c, n in zip(ci, b.n)],
        hovertemplate=f"{b.label}: %{{y:{value_format}}} · {level}% CI %{{customdata[0]}} · n=%{{customdata[1]}} seeds<extra></extra>",
    ))
    return traces


def band_figure(bands: Sequence[Band], *, title: str, x_title: str, y_title: str, y_tickformat: str | None = None,
                y_range: Sequence[float] | None = None, height: int = 360, level: int = 95,
                clip: tuple[float, float] | None = None, counts: bool = False) -> go.Figure:
    """Seed groups: per group the mean line in its method's colour over a shaded CI band in
    the same colour, see-through; the legend names groups (groups of one method differ by dash).
    Works on any x (step, cumulative FLOPs, wall time): the API puts each group on its own grid.
    ``clip``: the metric's possible range (e.g. (0, 1) for a ratio), where bands stop; ``counts``:
    y counts things (see :func:`steady_y`)."""
    fig = go.Figure()
    for b in bands:
        for tr in _band_traces(b, value_format=".1%" if y_tickformat == ".0%" else ".3g", level=level, clip=clip):
            fig.add_trace(tr)
    fig = _layout(fig, f"{title} <span style='font-size:12px;color:#666'>(band: {level}% CI across seeds)</span>", x_title, y_title,
                  height=height, y_tickformat=y_tickformat, y_range=y_range)
    if y_range is None:
        steady_y(fig, [v for b in bands for v in (*b.mean, *clipped(b.lo, clip), *clipped(b.hi, clip))], counts=counts)
    return integer_steps(fig, [v for b in bands for v in b.x]) if x_title == "step" else fig


def zero_acc_band_figure(groups: Sequence[tuple[Band, Band | None]], *, x_title: str = "step",
                         level: int = 95) -> go.Figure:
    """Paper Figure 9 for seed groups. ``groups``: (after-rescue band, after-explore band or
    None); line + band = after rescue (what the update sees), thin dotted = the after-explore
    mean (its band is left out to keep the chart readable). The legend gives each group's
    mean over its grid."""
    fig = go.Figure()
    for band, explore in groups:
        vals = [v for v in band.mean if v is not None]
        mean = f" (mean {pct(sum(vals) / len(vals))})" if vals else ""
        for tr in _band_traces(band, name=f"{band.label}{mean}", value_format=".1%", level=level, clip=(0.0, 1.0)):
            fig.add_trace(tr)
        if explore is not None and (list(explore.x) != list(band.x) or any(a != b for a, b in zip(explore.mean, band.mean))):
            fig.add_trace(go.Scatter(x=list(explore.x), y=list(explore.mean), name=f"{band.label}: after explore", mode="lines",
                                     legendgroup=band.label, showlegend=False, connectgaps=True,
                                     hovertemplate=f"{band.label} after explore: %{{y:.1%}}<extra></extra>",
                                     line={"color": method_color(band.method), "width": 1, "dash": "dot"}))
    fig = _layout(fig, f"Zero-accuracy ratio (line + band: after rescue, {level}% CI across seeds; dotted: after exploration)", x_title,
                  "fraction of prompts with no correct rollout", y_tickformat=".0%", height=380)
    return integer_steps(fig, [v for g in groups for v in g[0].x]) if x_title == "step" else fig


# ---------------------------------------------------------------- the headline (Compare page, first)


def headline_figure(bands: Sequence[Band], *, title: str, x_title: str, y_title: str, level: int = 95,
                    targets: Sequence[tuple[float, str]] = (), x_tickformat: str | None = None, seeds: bool = True,
                    height: int = 400) -> go.Figure:
    """The paper's headline (its Fig. 1): held-out accuracy against training compute, one line
    per method (per seed group: the mean over seeds over a CI band; per run: the run alone).
    ``targets``: (accuracy, label) drawn as dotted horizontal lines, the accuracies the
    compute-to-reach table measures, so where a line crosses one is where it reached it."""
    fig = go.Figure()
    for b in bands:
        for tr in _band_traces(b, value_format=".3f", level=level, clip=(0.0, 1.0)):
            if tr.fill != "toself":
                tr.mode, tr.marker = "lines+markers", {"size": 5}
                if not seeds:  # one run per line: no interval to speak of in the hover
                    tr.hovertemplate = f"{b.label}: %{{y:.3f}}<extra></extra>"
            fig.add_trace(tr)
    for y, label in targets:
        fig.add_hline(y=y, line={"color": "#9A9A9A", "dash": "dot", "width": 1}, annotation_text=label,
                      annotation_position="top left", annotation_font={"size": 10, "color": "#777"})
    note = f"band: {level}% CI across seeds" if seeds and any(v is not None for b in bands for v in b.lo) else ""
    fig = _layout(fig, subtitled(title, note), x_title, y_title, height=height)
    fig.update_xaxes(tickformat=x_tickformat, rangemode="tozero")
    return fig


@dataclass(frozen=True)
class ArenaPoint:
    """One seed group of the arena: its mean FLOPs per step and final Avg@k, each with half its CI
    across seeds (None without one)."""

    label: str
    method: str
    flops: float
    flops_half: float | None
    acc: float
    acc_half: float | None


def arena_figure(points: Sequence[ArenaPoint], *, k: int | None, level: int = 95) -> go.Figure:
    """The arena's trade-off: final Avg@k against FLOPs per step, one marker per group in its
    method's colour, with CI bars across seeds on both axes. Up and to the left is better."""
    fig = go.Figure()
    for p in points:
        fig.add_trace(go.Scatter(
            x=[p.flops], y=[p.acc], mode="markers+text", name=p.label, text=[p.label], textposition="top center",
            marker={"size": 11, "color": method_color(p.method)},
            error_x={"type": "data", "array": [p.flops_half or 0.0], "visible": p.flops_half is not None},
            error_y={"type": "data", "array": [p.acc_half or 0.0], "visible": p.acc_half is not None},
            hovertemplate=f"{p.label}<br>FLOPs / step %{{x:.3s}}<br>final Avg@{k or 'k'} %{{y:.3f}}<extra></extra>"))
    kk = k or "k"
    _layout(fig, subtitled(f"Final Avg@{kk} vs FLOPs per step", f"mean ± {level}% CI across seeds; up-left is better"),
            "FLOPs per step (rollout + train)", f"final held-out Avg@{kk}", height=360)
    fig.update_layout(hovermode="closest", showlegend=False)
    fig.update_xaxes(tickformat="~s")
    return fig
