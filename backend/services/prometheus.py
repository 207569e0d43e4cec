"""GET /metrics: platform gauges in the Prometheus text exposition format (version 0.0.4)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.models import StepMetric, utcnow
from backend.db.runs import runs_by_status

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
WINDOW_S = 60


def platform_gauges(session: Session, window_s: int = WINDOW_S) -> dict:
    """Runs per status, steps stored in the last ``window_s`` seconds, and all steps stored."""
    since = utcnow() - timedelta(seconds=window_s)
    recent = session.scalar(select(func.count()).select_from(StepMetric).where(StepMetric.logged_at >= since)) or 0
    total = session.scalar(select(func.count()).select_from(StepMetric)) or 0
    return {"by_status": runs_by_status(session), "recent_steps": int(recent), "window_s": window_s, "steps_total": int(total)}


def render(by_status: dict[str, int], recent_steps: int, window_s: int, steps_total: int) -> str:
    """The exposition text. Steps per second = steps stored over the last window / window."""
    lines = [
        "# HELP aero_queue_depth Runs waiting for a worker (status queued).",
        "# TYPE aero_queue_depth gauge",
        f"aero_queue_depth {by_status.get('queued', 0)}",
        "# HELP aero_runs Runs by status.",
        "# TYPE aero_runs gauge",
        *(f'aero_runs{{status="{s}"}} {n}' for s, n in by_status.items()),
        f"# HELP aero_steps_per_second Training steps stored per second over the last {window_s} s, all runs.",
        "# TYPE aero_steps_per_second gauge",
        f"aero_steps_per_second {recent_steps / window_s:.6g}",
        "# HELP aero_steps_stored Training steps stored, all runs.",
        "# TYPE aero_steps_stored gauge",
        f"aero_steps_stored {steps_total}",
    ]
    return "\n".join(lines) + "\n"
