"""GET /api/compare/curves: each seed group's mean curve with a confidence band.

Curves can sit on three x axes: the step, cumulative FLOPs (running sum of ``flops/total``
over every stored step, so no decimation error) or wall time (``time/elapsed_s``, the
run's training clock; the running sum of ``time/step_s`` where a run did not log it). Seeds
of a group are interpolated onto one grid and averaged (trainer.core.stats.interpolated_band).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import Any, Literal

from sqlalchemy.orm import Session

from backend.db.metrics import MetricColumns, read_step_metrics
from backend.services.groups import Group
from trainer.core.stats import grid_for, interpolated_band

XAxis = Literal["step", "flops", "time"]
X_KEYS = ("flops/total", "time/elapsed_s", "time/step_s")


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
        return running_sum(cols.series["flops/total"])
    elapsed = cols.series["time/elapsed_s"]
    if any(v is not None for v in elapsed):
        return [None if v is None else float(v) for v in elapsed]
    return running_sum(cols.series["time/step_s"])


def group_curves(session: Session, groups: Sequence[Group], keys: Sequence[str], x: XAxis,
                 points: int, alpha: float = 0.05) -> dict[str, Any]:
    """{"x": axis, "groups": [{key, label, method, run_ids, curves: {metric: band}}]}."""
    out = []
    for g in groups:
        cols = {r.id: read_step_metrics(session, r.id, [*keys, *X_KEYS]) for r in g.runs}
        xs = {rid: x_of(c, x) for rid, c in cols.items()}
        curves = {}
        for key in keys:
            series = [(xs[rid], c.series[key]) for rid, c in cols.items()]
            grid = grid_for([(xv, y) for xv, y in series], points, integer=(x == "step"))
            curves[key] = interpolated_band(series, grid, alpha)
        out.append({"key": g.key, "label": g.label, "method": g.method, "run_ids": g.run_ids, "curves": curves})
    return {"x": x, "alpha": alpha, "groups": out}
