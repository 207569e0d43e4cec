"""GET /api/compare/curves: each seed group's mean curve with a confidence band.

Curves can sit on three x axes: the step, cumulative FLOPs (running sum of ``flops/total``
over every stored step, so no decimation error) or wall time (``time/elapsed_s``, the
run's training clock; the running sum of ``time/step_s`` where a run did not log it). Seeds
of a group are interpolated onto one grid and averaged (trainer.core.stats.interpolated_band).

Besides step metrics, a key can name an evaluation: ``eval/<benchmark>/<metric>`` (metric
``avg_at_k`` or ``pass_at_k``; ``eval/overall/avg_at_k`` is the paper's headline, held-out
Avg@k pooled over benchmarks). Its points are the run's eval steps, placed on the same axis
at that step (step 0, before any update, at x = 0), so "accuracy against training FLOPs"
and "against training time" exclude evaluation from the x axis by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import Any, Literal

from sqlalchemy.orm import Session

from backend.db.metrics import MetricColumns, eval_values, read_step_metrics
from backend.services.groups import Group
import common.metric_keys as mk
from trainer.core.reach import smoothed
from trainer.core.stats import grid_for, interpolated_band

XAxis = Literal["step", "flops", "time"]
X_KEYS = (mk.FLOPS_TOTAL, mk.ELAPSED_S, mk.STEP_S)
EVAL_PREFIX = mk.EVAL_PREFIX
EVAL_METRICS = mk.EVAL_METRICS


def running_sum(values: Sequence[float | None]) -> list[float | None]:
    """Cumulative sum; a missing value adds nothing (the step cost is unknown, not free, but
    skipping it keeps the axis monotone). A run that never logged the quantity has no x at all."""
    if all(v is None for v in values):
        return [None] * len(values)
    return list(accumulate(0.0 if v is None else float(v) for v in values))


def x_of(cols: MetricColumns, x: XAxis) -> list[float | None]:
    """The x value of each stored step on the chosen axis."""
    if x == "step":
        return [float(s) for s in cols.steps]
    if x == "flops":
        return running_sum(cols.series[mk.FLOPS_TOTAL])
    elapsed = cols.series[mk.ELAPSED_S]
    if any(v is not None for v in elapsed):
        return [None if v is None else float(v) for v in elapsed]
    return running_sum(cols.series[mk.STEP_S])


def axis_at_steps(cols: MetricColumns, x: XAxis) -> dict[int, float]:
    """{step: x} for every stored step with an x, plus {0: 0.0}: before the first update no
    training compute was spent. Empty when the run has no x on this axis at all (its cost is
    unknown, not zero). ``cols`` must hold :data:`X_KEYS`."""
    at = {int(s): v for s, v in zip(cols.steps, x_of(cols, x)) if v is not None}
    return {0: 0.0, **at} if at or x == "step" else {}


def parse_eval_key(key: str) -> tuple[str, str] | None:
    """'eval/overall/avg_at_k' -> ('overall', 'avg_at_k'); None for a step-metric key. The
    benchmark is everything between the prefix and the last '/', so it may contain '/'.
    ValueError (with what to write instead) for a malformed eval key."""
    if not key.startswith(EVAL_PREFIX):
        return None
    bench, _, metric = key[len(EVAL_PREFIX):].rpartition("/")
    if not bench or metric not in EVAL_METRICS:
        raise ValueError(f"eval keys are eval/<benchmark>/<metric> with metric avg_at_k or pass_at_k, "
                         f"e.g. eval/overall/avg_at_k; got {key!r}")
    return bench, metric


def eval_points(session: Session, run_id: int, at: dict[int, float] | None, bench: str, metric: str,
                window: int = 1) -> tuple[list[float | None], list[float]]:
    """(x, value) of one run's evaluations of ``bench``: x from ``at`` ({step: x}; None = the
    step axis, x = step), values smoothed by a trailing mean over ``window`` evaluations. An
    eval step without an x (no cost logged for it) gets None and drops out of the band."""
    steps, values = eval_values(session, run_id, bench, metric)
    if window > 1 and values:
        values = smoothed(values, window).tolist()
    xs = [float(s) if at is None else at.get(s) for s in steps]
    return xs, values


def eval_grid(series: Sequence[tuple[Sequence[float | None], Sequence[float | None]]], points: int) -> list[float]:
    """The grid of an eval curve: every x at which some run evaluated (so a single run, or seeds
    evaluated at the same steps, is shown at its real points, not interpolated between them),
    or ``points`` evenly spaced values when there are more distinct x than that."""
    xs = sorted({float(v) for x, _ in series for v in x if v is not None})
    return xs if len(xs) <= points else grid_for(series, points)


def group_curves(session: Session, groups: Sequence[Group], keys: Sequence[str], x: XAxis,
                 points: int, alpha: float = 0.05, smooth: int = 1) -> dict[str, Any]:
    """{"x": axis, "groups": [{key, label, method, run_ids, curves: {metric: band}}]}. Eval keys
    (:func:`parse_eval_key`) are smoothed per run over ``smooth`` evaluations before averaging."""
    evals = {key: parse_eval_key(key) for key in keys}
    step_keys = [k for k in keys if evals[k] is None]
    out = []
    for g in groups:
        cols = {r.id: read_step_metrics(session, r.id, [*step_keys, *X_KEYS]) for r in g.runs}
        xs = {rid: x_of(c, x) for rid, c in cols.items()}
        at = {rid: None if x == "step" else axis_at_steps(c, x) for rid, c in cols.items()}
        curves = {}
        for key in keys:
            if evals[key] is not None:
                series = [eval_points(session, rid, at[rid], *evals[key], window=smooth) for rid in cols]
                grid = eval_grid(series, points)
            else:
                series = [(xs[rid], c.series[key]) for rid, c in cols.items()]
                grid = grid_for(series, points, integer=(x == "step"))
            curves[key] = interpolated_band(series, grid, alpha)
        out.append({"key": g.key, "label": g.label, "method": g.method, "run_ids": g.run_ids, "curves": curves})
    return {"x": x, "alpha": alpha, "smooth": smooth, "groups": out}
