"""Sweeps: a named grid of runs created together."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.models import Run, Sweep


class SweepNotFound(LookupError):
    def __init__(self, sweep_id: int):
        self.sweep_id = sweep_id
        super().__init__(f"sweep {sweep_id} not found")


def create_sweep(session: Session, name: str, spec: dict[str, Any]) -> Sweep:
    sweep = Sweep(name=name, spec=spec)
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
