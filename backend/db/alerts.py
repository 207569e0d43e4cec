"""Fired alert rules of a run (``alert_events``; trainer/spec/alerts.py): written by its worker,
read by ``GET /api/runs/{id}/alerts`` and Run detail."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from backend.db.models import AlertEvent, Run
from backend.db.notify import notify_run_changed

MESSAGE_CHARS = 2000


def record_alert(session: Session, run_id: int, *, rule: int, kind: str, step: int, value: float | None,
                 message: str, stopped: bool) -> AlertEvent | None:
    """Insert the event of ``rule`` firing; None when that rule already fired for the run (a
    redelivered or resumed run: the unique (run, rule) keeps one)."""
    ev = AlertEvent(run_id=run_id, rule=rule, kind=kind, step=step, value=value, message=message[:MESSAGE_CHARS],
                    stopped=stopped, delivery="")
    try:
        with session.begin_nested():
            session.add(ev)
            session.flush()
    except IntegrityError:
        return None
    notify_run_changed(session, run_id)
    return ev


def set_delivery(session: Session, event_id: int, delivery: str) -> None:
    """What became of the event's webhook post ("posted: 204", "failed: ...", "not posted: ...")."""
    session.execute(update(AlertEvent).where(AlertEvent.id == event_id).values(delivery=delivery[:MESSAGE_CHARS]))


def fired_rules(session: Session, run_id: int) -> set[int]:
    return set(session.scalars(select(AlertEvent.rule).where(AlertEvent.run_id == run_id)))


def list_alerts(session: Session, run_id: int) -> list[AlertEvent]:
    """The run's fired rules, oldest first."""
    return list(session.scalars(select(AlertEvent).where(AlertEvent.run_id == run_id)
                                .order_by(AlertEvent.created_at, AlertEvent.id)))


def set_stop_reason(session: Session, run_id: int, reason: str, worker: str) -> bool:
    """Record why the run stopped early, while ``worker`` owns it."""
    res = session.execute(update(Run).where(Run.id == run_id, Run.worker == worker).values(stop_reason=reason[:MESSAGE_CHARS]))
    return res.rowcount == 1
