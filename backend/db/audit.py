"""The audit log: one row per state change, written in the same transaction as the change, so a
change that rolls back leaves no record and a committed one always has its record. A quota
refusal stores nothing else, so it is recorded in a transaction of its own.

Actions: ``run.create``, ``run.patch``, ``run.cancel``, ``run.retry`` (a worker re-queued a run
whose attempt lost a node; user None), ``run.delete``, ``sweep.create``,
``sweep.delete``, ``token.create``, ``token.revoke``, ``quota.refuse``. ``user``/``role`` are
the caller's (None: the operator at the command line, ``aero token create``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, get_args

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.models import AuditEvent, Run

Action = Literal["run.create", "run.patch", "run.cancel", "run.resume", "run.retry", "run.delete", "sweep.create",
                 "sweep.delete", "token.create", "token.revoke", "quota.refuse"]
ACTIONS: tuple[str, ...] = get_args(Action)


def record(session: Session, action: str, *, user: str | None, role: str | None, target: str | None = None,
           before: dict[str, Any] | None = None, after: dict[str, Any] | None = None) -> AuditEvent:
    """Add one event to the session's transaction (the caller commits with its change)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}")
    event = AuditEvent(user=user, role=role, action=action, target=target, before=before, after=after)
    session.add(event)
    return event


def run_state(run: Run) -> dict[str, Any]:
    """What the log keeps of a run before or after a change."""
    return {"name": run.name, "method": run.method, "status": run.status, "owner": run.owner, "queue": run.queue,
            "sweep_id": run.sweep_id, "tags": list(run.tags or []), "notes": run.notes,
            "cancel_requested": bool(run.cancel_requested)}


def list_events(session: Session, *, user: str | None = None, action: Sequence[str] | None = None,
                target: str | None = None, since: datetime | None = None, limit: int = 100,
                offset: int = 0) -> tuple[list[AuditEvent], int]:
    """Events matching every given filter, newest first, and their total count before paging."""
    where = []
    if user is not None:
        where.append(AuditEvent.user == user)
    if action:
        where.append(AuditEvent.action.in_(list(action)))
    if target is not None:
        where.append(AuditEvent.target == target)
    if since is not None:
        where.append(AuditEvent.at >= since)
    total = session.scalar(select(func.count(AuditEvent.id)).where(*where)) or 0
    rows = session.scalars(select(AuditEvent).where(*where).order_by(AuditEvent.id.desc()).limit(limit).offset(offset))
    return list(rows), total
