"""The rollout-allocation arena's trade-off chart (the Compare page's leaderboard): each seed
group's final held-out Avg@k against its FLOPs per step, with CIs across seeds on both axes, in
its method's colour from ``style``. Pure function, no Streamlit and no HTTP."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from dashboard.method_style import MethodStyle
from dashboard.plotting import layout, subtitled


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


def arena_figure(points: Sequence[ArenaPoint], *, style: MethodStyle, k: int | None, level: int = 95) -> go.Figure:
    """The arena's trade-off: final Avg@k against FLOPs per step, one marker per group in its
    method's colour, with CI bars across seeds on both axes. Up and to the left is better."""
    fig = go.Figure()
    for p in points:
        fig.add_trace(go.Scatter(
            x=[p.flops], y=[p.acc], mode="markers+text", name=p.label, text=[p.label], textposition="top center",
            marker={"size": 11, "color": style.color(p.method)},
            error_x={"type": "data", "array": [p.flops_half or 0.0], "visible": p.flops_half is not None},
            error_y={"type": "data", "array": [p.acc_half or 0.0], "visible": p.acc_half is not None},
            hovertemplate=f"{p.label}<br>FLOPs / step %{{x:.3s}}<br>final Avg@{k or 'k'} %{{y:.3f}}<extra></extra>"))
    kk = k or "k"
    layout(fig, subtitled(f"Final Avg@{kk} vs FLOPs per step", f"mean ± {level}% CI across seeds; up-left is better"),
           "FLOPs per step (rollout + train)", f"final held-out Avg@{kk}", height=360)
    fig.update_layout(hovermode="closest", showlegend=False)
    fig.update_xaxes(tickformat="~s")
    return fig
