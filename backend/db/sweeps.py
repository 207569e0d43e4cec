"""Sweeps: a named grid of runs created together."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from backend.db.models import FINISHED_STATUSES, AlertEvent, Checkpoint, EvalResult, Run, StepMetric, Sweep
from backend.db.runs import delete_run


class SweepNotFound(LookupError):
    def __init__(self, sweep_id: int):
        self.sweep_id = sweep_id
        super().__init__(f"sweep {sweep_id} not found")


class SweepConflict(RuntimeError):
    """Some of the sweep's runs have not finished."""

    def __init__(self, sweep_id: int, unfinished: dict[str, int]):
        self.sweep_id, self.unfinished = sweep_id, unfinished
        what = ", ".join(f"{n} {st}" for st, n in sorted(unfinished.items()))
        super().__init__(f"sweep {sweep_id} has unfinished runs ({what}): cancel them first, then delete the sweep")


def create_sweep(session: Session, name: str, spec: dict[str, Any], owner: str | None = None) -> Sweep:
    sweep = Sweep(name=name, spec=spec, owner=owner)
    session.add(sweep)
    session.flush()
    return sweep


def get_sweep(session: Session, sweep_id: int) -> Sweep:
    sweep = session.get(Sweep, sweep_id)
    if sweep is None:
        raise SweepNotFound(sweep_id)
    return sweep


def sweep_runs(session: Session, sweep_id: int) -> list[Run]:
    return list(session.scalars(select(Run).where(Run.sweep_id == sweep_id).order_by(Run.id)))


def list_sweeps(session: Session, limit: int, offset: int) -> tuple[list[Sweep], int, dict[int, dict[str, int]]]:
    """Newest first: (sweeps, total count, {sweep id: {status: runs}}) in two queries."""
    total = session.scalar(select(func.count()).select_from(Sweep)) or 0
    sweeps = list(session.scalars(select(Sweep).order_by(Sweep.id.desc()).limit(limit).offset(offset)))
    counts: dict[int, dict[str, int]] = {sw.id: {} for sw in sweeps}
    if sweeps:
        rows = session.execute(select(Run.sweep_id, Run.status, func.count()).where(Run.sweep_id.in_(counts))
                               .group_by(Run.sweep_id, Run.status))
        for sweep_id, status, n in rows:
            counts[sweep_id][status] = n
    return sweeps, total, counts


def delete_sweep(session: Session, sweep_id: int) -> list[int]:
    """Delete a sweep and its runs (with their metrics, evals and checkpoint rows), all finished;
    :class:`SweepConflict` (nothing deleted) while any run is queued or running. Returns the
    deleted run ids. The caller commits: one transaction, so a run that changes status under us
    (``RunConflict`` from ``delete_run``) rolls the whole deletion back."""
    get_sweep(session, sweep_id)
    rows = session.execute(select(Run.id, Run.status).where(Run.sweep_id == sweep_id).order_by(Run.id)).all()
    unfinished: dict[str, int] = {}
    for _, status in rows:
        if status not in FINISHED_STATUSES:
            unfinished[status] = unfinished.get(status, 0) + 1
    if unfinished:
        raise SweepConflict(sweep_id, unfinished)
    for run_id, _ in rows:
        delete_run(session, run_id)
    session.execute(delete(Sweep).where(Sweep.id == sweep_id))
    return [run_id for run_id, _ in rows]


def discard_sweep(session: Session, sweep_id: int) -> None:
    """Remove a sweep and its runs whatever their status (with any metric rows): the undo of a
    creation whose enqueue failed. The caller commits."""
    run_ids = select(Run.id).where(Run.sweep_id == sweep_id)
    for model in (StepMetric, EvalResult, Checkpoint, AlertEvent):
        session.execute(delete(model).where(model.run_id.in_(run_ids)))
    session.execute(delete(Run).where(Run.sweep_id == sweep_id))
    session.execute(delete(Sweep).where(Sweep.id == sweep_id))
