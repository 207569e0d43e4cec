"""Change notices for live readers: on PostgreSQL every write a live view waits for (a run's
steps, status, progress) also sends ``NOTIFY aero_runs, '<run id>'`` in its own transaction, so
the notice is delivered when the write commits and never before it is visible. The API's SSE
streams wake on it (``backend/services/live.py``) instead of waiting for their next poll.
SQLite has no notification channel: there the listener watches ``PRAGMA data_version``."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

CHANNEL = "aero_runs"


def notify_run_changed(session: Session, run_id: int) -> None:
    """Queue a change notice for ``run_id``; PostgreSQL sends it at commit (and folds repeats
    within one transaction into one). A no-op on SQLite."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_notify(:channel, :payload)"), {"channel": CHANNEL, "payload": str(run_id)})
