"""Store reads and writes the worker tests share (imported as ``tests.worker.runs``)."""

from __future__ import annotations

import subprocess

from sqlalchemy import select, update

from backend.db.models import Run, StepMetric
from backend.db.session import session_scope


def run_row(url: str, run_id: int) -> Run:
    with session_scope(url) as s:
        return s.get(Run, run_id)


def stored_steps(url: str, run_id: int) -> list[tuple[int, object]]:
    with session_scope(url) as s:
        return list(s.execute(select(StepMetric.step, StepMetric.logged_at).where(StepMetric.run_id == run_id)
                              .order_by(StepMetric.step)).all())


def set_run(url: str, run_id: int, **values) -> None:
    """Set a run's columns directly, as a crashed or remote worker would have left them."""
    with session_scope(url) as s:
        s.execute(update(Run).where(Run.id == run_id).values(**values))


def dead_pid() -> int:
    """The pid of a process that has exited (a dead owner on this host)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid
