"""Store reads the end-to-end tests share (imported as ``tests.worker.runs``)."""

from __future__ import annotations

from sqlalchemy import select

from backend.db.models import Run, StepMetric
from backend.db.session import session_scope


def run_row(url: str, run_id: int) -> Run:
    with session_scope(url) as s:
        return s.get(Run, run_id)


def stored_steps(url: str, run_id: int) -> list[tuple[int, object]]:
    with session_scope(url) as s:
        return list(s.execute(select(StepMetric.step, StepMetric.logged_at).where(StepMetric.run_id == run_id)
                              .order_by(StepMetric.step)).all())
