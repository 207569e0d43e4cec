"""How lists show a run (stdlib only): its state, which is its status except ``waiting`` for a
running run that waits for its GPUs (``waiting_for`` set; not a stored status, see
backend/db/runs.py), and how long it has waited. The API sends ``state`` and ``waiting_since``
with every run; the dashboard's run lists and ``aero runs`` print through here."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

WAITING = "waiting"


def state_of(run: Mapping[str, Any]) -> str:
    """The run's ``state`` as the API gives it (derived here from ``status`` and ``waiting_for``
    for an answer that lacks it)."""
    if run.get("state"):
        return str(run["state"])
    return WAITING if run.get("status") == "running" and run.get("waiting_for") else str(run.get("status"))


def parse_time(text: str | None) -> datetime | None:
    """An API timestamp ('2026-12-06T10:00:00Z') as an aware UTC datetime; None for None or junk."""
    if not text:
        return None
    try:
        t = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def duration_text(seconds: float) -> str:
    """'45s', '3m 12s', '2h 05m', '3d 4h': the two largest units (0s for a negative clock skew)."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def waited_text(run: Mapping[str, Any], now: datetime | None = None) -> str:
    """How long a waiting run has waited ('3m 12s', from ``waiting_since``); '' for a run that does
    not wait or whose wait began at no recorded time."""
    since = parse_time(run.get("waiting_since")) if state_of(run) == WAITING else None
    if since is None:
        return ""
    return duration_text(((now or datetime.now(UTC)) - since).total_seconds())
