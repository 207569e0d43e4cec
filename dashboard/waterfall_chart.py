"""The savings waterfall (paper Fig. 8, the Compare page): the baseline method's cost per step,
what AERO's strategies S1, S2 and S3 each save, and what AERO is left with. Bars in the
baseline's and AERO's method colours from ``style``. Pure function, no Streamlit and no HTTP."""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from common.fmt import pct, si
from dashboard.method_style import MethodStyle
from dashboard.plotting import layout

WATERFALL_UNITS: dict[str, tuple[str, str]] = {  # unit -> (axis title, SI unit for labels)
    "seconds": ("training seconds per step", "s"),
    "flops": ("training FLOPs per step", "FLOP"),
    "step_seconds": ("seconds per step (whole step)", "s"),
    "total_flops": ("FLOPs per step (rollout + train)", "FLOP"),
    "rollouts": ("trained rollouts per step", ""),
    "tokens": ("trained tokens per step", ""),
}
STEP_NAMES = ("S1 early rescue", "S2 Bayesian", "S3 rejection")
FINAL_METHOD = "aero"  # the last bar: every strategy on

COUNTERFACTUAL_GRPO = ("GRPO bar = what the AERO run trained plus the savings (counterfactual at the same rollout "
                       "budget), not the GRPO run's measured step time")


def waterfall_figure(wf: Mapping[str, float | None], unit: str, *, style: MethodStyle, title: str, subtitle: str = "",
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
    base_color = style.color(style.baseline)
    labels = ["GRPO", *STEP_NAMES, "AERO"]
    # the bar's own label says it (a two-line tick would tilt every tick of the chart)
    bottoms, heights, texts, colors = [0.0], [base], [si(base, u) + ("<br>counterfactual" if counterfactual else "")], [base_color]
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
    colors.append(style.color(FINAL_METHOD))
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
        fig.add_hline(y=value, line={"color": base_color, "dash": "dash", "width": 1.5},
                      annotation_text=f"{label}: {si(value, u)}", annotation_position="top right",
                      annotation_font={"size": 11, "color": base_color})
    full = f"{title} <span style='font-size:12px;color:#666'>({subtitle})</span>" if subtitle else title
    fig = layout(fig, full, "", axis, height=380)
    top = max([base, final, *(b + h for b, h in zip(bottoms, heights))] + [measured_grpo[0] if measured_grpo else 0, 0])
    fig.update_layout(hovermode="closest", showlegend=False, margin={"l": 60, "r": 20, "t": 50, "b": 40},
                      uniformtext={"minsize": 11, "mode": "show"})
    fig.update_yaxes(tickformat="~s" if u != "s" else None, range=[0, top * 1.25 if top > 0 else 1])
    return fig
