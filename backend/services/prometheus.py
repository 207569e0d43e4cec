"""GET /metrics: platform gauges in the Prometheus text exposition format (version 0.0.4),
written by prometheus_client (the official client library), not by hand."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.models import StepMetric, utcnow
from backend.db.runs import gpus_held, runs_by_status, runs_waiting

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
WINDOW_S = 60


def platform_gauges(session: Session, window_s: int = WINDOW_S) -> dict:
    """Runs per status, running runs waiting for their GPUs, GPUs held per owner, steps stored in
    the last ``window_s`` seconds, and all steps stored."""
    since = utcnow() - timedelta(seconds=window_s)
    recent = session.scalar(select(func.count()).select_from(StepMetric).where(StepMetric.logged_at >= since)) or 0
    total = session.scalar(select(func.count()).select_from(StepMetric)) or 0
    return {"by_status": runs_by_status(session), "recent_steps": int(recent), "window_s": window_s, "steps_total": int(total),
            "waiting": runs_waiting(session), "held": gpus_held(session)}


def families(by_status: dict[str, int], recent_steps: int, window_s: int, steps_total: int, waiting: int = 0,
             held: dict[str | None, int] | None = None) -> list[GaugeMetricFamily]:
    """The gauges, as prometheus_client metric families. Steps per second = steps stored over
    the last window / window. ``held``: GPUs held per owner (None: runs stored before users
    existed, labelled owner="")."""
    runs = GaugeMetricFamily("aero_runs", "Runs by status.", labels=["status"])
    for status, n in by_status.items():
        runs.add_metric([status], n)
    gpus = GaugeMetricFamily("aero_gpus_held", "GPUs held by each user's running runs that wait for nothing (their "
                             "stored gpus: placed, or needing no placement).", labels=["owner"])
    for owner, n in sorted((held or {}).items(), key=lambda kv: kv[0] or ""):
        gpus.add_metric([owner or ""], n)
    return [GaugeMetricFamily("aero_queue_depth", "Runs waiting for a worker (status queued).", value=by_status.get("queued", 0)),
            runs,
            GaugeMetricFamily("aero_runs_waiting", "Running runs waiting for their GPUs before their first step "
                              "(claimed by a worker, waiting_for set).", value=waiting),
            gpus,
            GaugeMetricFamily("aero_steps_per_second", f"Training steps stored per second over the last {window_s} s, all runs.",
                              value=recent_steps / window_s),
            GaugeMetricFamily("aero_steps_stored", "Training steps stored, all runs.", value=steps_total)]


class _Snapshot(Collector):
    """A collector of values read once (this request's), so each answer reflects the store now."""

    def __init__(self, fams: list[GaugeMetricFamily]):
        self.fams = fams

    def collect(self):
        return iter(self.fams)


def render(by_status: dict[str, int], recent_steps: int, window_s: int, steps_total: int, waiting: int = 0,
           held: dict[str | None, int] | None = None) -> str:
    """The exposition text, written by prometheus_client from a registry of this request's values."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families(by_status, recent_steps, window_s, steps_total, waiting, held)))
    return generate_latest(registry).decode()
