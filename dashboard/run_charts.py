"""One run's figures (the Run detail page): training reward, held-out accuracy, zero-accuracy,
prompt strata, rollouts, time and FLOPs per step, optimisation health, asynchronous training. Each takes the run's
steps and its metric series (keys of docs/metrics.md) as the API returns them, and draws the
run in its method's colour from ``style``. Pure functions, no Streamlit and no HTTP."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

import common.metric_keys as mk
from dashboard.method_style import MethodStyle
from dashboard.plotting import (UNDERLAY, Curve, Series, column, has_any, integer_steps, lines_figure, stacked_area_figure,
                                steady_y, subtitled)

STRATA_COLORS = {"rescue": "#5B6770", "low": "#F2B447", "high": "#8FBC8F"}
PHASE_COLORS = {"rollout": "#8DA0CB", "reward": "#BDBDBD", "train": "#FC8D62"}

REWARD_NOTES: dict[str, str] = {  # what a training-reward curve measures, said on the chart
    mk.REWARD_MEAN: "mean reward of generated rollouts; AERO's include rescue rounds on unsolved prompts, so lower by "
                   "construction; not held-out accuracy",
    mk.REWARD_TRAINED_MEAN: "mean reward of trained rollouts; AERO's are the curated set (rescued groups, down-sampled "
                           "negatives); not held-out accuracy",
}


def reward_figure(steps: Sequence[int], s: Series, method: str, *, style: MethodStyle) -> go.Figure:
    """Mean verifier reward of generated rollouts, and of trained rollouts when logged: a
    training signal, not held-out accuracy. For methods that rescue (S1 on, from the spec) the
    generated set includes rescue rounds on zero-accuracy prompts (lower by construction) and the
    trained set is curated, so the legend and the title say which is which."""
    aero = style.rescues(method)
    curves = [Curve("generated rollouts" + (", incl. rescue rounds" if aero else "") + " (reward/mean)", method, steps,
                    column(s, mk.REWARD_MEAN, len(steps)))]
    if has_any(s, mk.REWARD_TRAINED_MEAN):
        curves.append(Curve("trained rollouts" + (", curated" if aero else "") + " (reward/trained_mean)", method, steps,
                            column(s, mk.REWARD_TRAINED_MEAN, len(steps)), **UNDERLAY))
    note = ("AERO: generated includes rescue rounds on zero-accuracy prompts; trained = the curated set"
            if aero else "mean verifier reward of this step's rollouts")
    return lines_figure(curves, style=style, title=subtitled("Training reward (not held-out accuracy)", note), x_title="step",
                        y_title="mean reward (0–1)", y_range=[0, 1.02])


def heldout_figure(steps: Sequence[int], avg: Sequence[float | None], pas: Sequence[float | None], method: str,
                   k: int | None, *, style: MethodStyle) -> go.Figure:
    """Held-out accuracy at each evaluation (every benchmark pooled): Avg@k solid, Pass@k dashed,
    with markers (a run evaluates a handful of times)."""
    kk = k or "k"
    fig = lines_figure([Curve(f"Avg@{kk}", method, steps, avg), Curve(f"Pass@{kk}", method, steps, pas, dash="dash")],
                       style=style, title=subtitled(f"Held-out Avg@{kk} over training", "all benchmarks pooled, fixed problems"),
                       x_title="step", y_title="held-out accuracy (0–1)", y_range=[0, 1.02], height=320)
    fig.update_traces(mode="lines+markers")
    return fig


def zero_acc_figure(steps: Sequence[int], s: Series, method: str, *, style: MethodStyle) -> go.Figure:
    """Fraction of prompts with no correct rollout, after exploration and after S1 rescue."""
    n = len(steps)
    curves = [Curve("after explore", method, steps, column(s, mk.ZERO_ACC_AFTER_EXPLORE, n), **UNDERLAY),
              Curve("after rescue", method, steps, column(s, mk.ZERO_ACC_AFTER_RESCUE, n))]
    return lines_figure(curves, style=style, title="Zero-accuracy ratio", x_title="step", y_title="fraction of prompts",
                        y_tickformat=".0%", y_range=[0, 1.02])


def strata_figure(steps: Sequence[int], s: Series) -> go.Figure:
    """AERO strata after exploration as a stacked area (prompts per step)."""
    n = len(steps)
    layers = {"rescue (c ≤ S)": column(s, mk.STRATA_RESCUE, n), "low success": column(s, mk.STRATA_LOW, n),
              "high success": column(s, mk.STRATA_HIGH, n)}
    colors = dict(zip(layers, STRATA_COLORS.values()))
    return stacked_area_figure(steps, layers, colors, title="Prompt strata after exploration", x_title="step", y_title="prompts",
                               counts=True)


def rollouts_figure(steps: Sequence[int], s: Series, method: str, *, style: MethodStyle) -> go.Figure:
    """Rollouts generated vs rollouts that entered the update."""
    n = len(steps)
    curves = [Curve("generated", method, steps, column(s, mk.ROLLOUTS_GENERATED, n), **UNDERLAY),
              Curve("trained", method, steps, column(s, mk.ROLLOUTS_TRAINED, n))]
    return lines_figure(curves, style=style, title="Rollouts per step", x_title="step", y_title="rollouts", counts=True)


def time_split_figure(steps: Sequence[int], s: Series) -> go.Figure:
    """Seconds per step split into generation, reward (verifier) and training, stacked."""
    n = len(steps)
    layers = {"rollout": column(s, mk.ROLLOUT_S, n), "reward": column(s, mk.REWARD_S, n), "train": column(s, mk.TRAIN_S, n)}
    return stacked_area_figure(steps, layers, PHASE_COLORS, title="Time per step", x_title="step", y_title="seconds")


def flops_figure(steps: Sequence[int], s: Series) -> go.Figure:
    """FLOPs per step: rollout (generation) and training, stacked."""
    n = len(steps)
    layers = {"rollout": column(s, mk.FLOPS_ROLLOUT, n), "train": column(s, mk.FLOPS_TRAIN, n)}
    fig = stacked_area_figure(steps, layers, PHASE_COLORS, title="FLOPs per step", x_title="step", y_title="FLOPs")
    fig.update_yaxes(tickformat="~s")
    return fig


def health_figure(steps: Sequence[int], s: Series, method: str, *, style: MethodStyle, kl: bool = True) -> go.Figure:
    """Gradient norm (before clipping), policy entropy (nats/token) and k3 KL, one panel each.
    ``kl=False`` (the run's kl_coef is 0): no KL panel, since the trainer neither computes nor
    applies a KL penalty then and a flat 0 would read as a measured KL of 0; the title says so."""
    panels = [(mk.TRAIN_GRAD_NORM, "grad norm"), (mk.TRAIN_ENTROPY, "entropy (nats/token)")]
    if kl:
        panels.append((mk.TRAIN_KL, "KL to reference"))
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[p[1] for p in panels], horizontal_spacing=0.08)
    for i, (key, label) in enumerate(panels, start=1):
        ys = column(s, key, len(steps))
        fig.add_trace(go.Scatter(x=list(steps), y=ys, name=label, mode="lines",
                                 line={"color": style.color(method), "width": 2}, showlegend=False), row=1, col=i)
        fig.update_xaxes(title_text="step", row=1, col=i)
        steady_y(fig, ys, row=1, col=i)
    integer_steps(fig, steps)
    title = "Optimisation health" if kl else subtitled("Optimisation health", "KL off (kl_coef = 0): no KL panel")
    fig.update_layout(title={"text": title, "x": 0, "font": {"size": 15}}, height=300,
                      margin={"l": 50, "r": 20, "t": 70, "b": 40}, template="plotly_white")
    return fig


OFFPOLICY_KEYS = (mk.STALENESS_MEAN, mk.STALENESS_MAX, mk.IS_WEIGHT_MEAN, mk.IS_CAPPED_FRAC, mk.SAMPLER_IDLE_S,
                  mk.TRAINER_IDLE_S)  # logged by asynchronous runs only (offpolicy.max_staleness > 0)


def offpolicy_figure(steps: Sequence[int], s: Series, method: str, *, style: MethodStyle) -> go.Figure:
    """Asynchronous training, one panel each: how stale the trained rows were (mean, max; in
    policy versions), the importance weights pi_old / mu (token mean before the cap, and the share
    of tokens past the cap that tis truncated or mis masked), and how long each side waited for
    the other. Weights are logged only on steps that trained stale rows with a correction (a
    run's first k steps are on-policy), so their lines have gaps, not zeros, elsewhere. The idle
    lines take the sampler's and the trainer's colours of *Time per step* (rollout, train)."""
    n, own = len(steps), style.color(method)
    panels = (
        ("staleness (versions)", ((mk.STALENESS_MEAN, "staleness mean", own, "solid"),
                                  (mk.STALENESS_MAX, "staleness max", own, "dash"))),
        ("importance weights", ((mk.IS_WEIGHT_MEAN, "weight mean (before cap)", own, "solid"),
                                (mk.IS_CAPPED_FRAC, "fraction past the cap", own, "dot"))),
        ("idle seconds per step", ((mk.SAMPLER_IDLE_S, "sampler idle", PHASE_COLORS["rollout"], "solid"),
                                   (mk.TRAINER_IDLE_S, "trainer idle", PHASE_COLORS["train"], "solid"))),
    )
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[p[0] for p in panels], horizontal_spacing=0.08)
    for i, (_, lines) in enumerate(panels, start=1):
        for key, name, color, dash in lines:
            fig.add_trace(go.Scatter(x=list(steps), y=column(s, key, n), name=name, mode="lines",
                                     line={"color": color, "dash": dash, "width": 2}), row=1, col=i)
        fig.update_xaxes(title_text="step", row=1, col=i)
        steady_y(fig, [v for line in lines for v in column(s, line[0], n)], counts=i == 1, row=1, col=i)
    fig.update_yaxes(rangemode="tozero", row=1, col=3)  # seconds waited: 0 is the point of reference
    integer_steps(fig, steps)
    fig.update_layout(title={"text": subtitled("Asynchronous training", "the sampler runs up to k steps ahead"), "x": 0,
                             "font": {"size": 15}}, height=330, margin={"l": 50, "r": 20, "t": 100, "b": 40},
                      template="plotly_white", hovermode="x unified",
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.14, "xanchor": "left", "x": 0, "font": {"size": 11}})
    return fig
