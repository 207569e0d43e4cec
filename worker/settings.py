"""Worker-side knobs, read from the environment once per process.

The store and broker URLs come from ``backend.settings`` (DATABASE_URL, REDIS_URL, AERO_DATA_DIR);
this module holds only what the worker, heartbeat and reaper add on top. Every default is chosen
for a laptop; docs/deploy.md explains how they interact (redelivery timing).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def _float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def _int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


@dataclass(frozen=True)
class WorkerSettings:
    concurrency: int = field(default_factory=lambda: _int("AERO_WORKER_CONCURRENCY", 1))
    # Empty = auto: "cpu", plus "gpu" when this machine has CUDA (see celery_app.default_queues).
    queues: str = field(default_factory=lambda: os.environ.get("AERO_WORKER_QUEUES", ""))
    heartbeat_s: float = field(default_factory=lambda: _float("AERO_HEARTBEAT_S", 5.0))
    # A running run whose heartbeat is older than this is presumed orphaned.
    stale_after_s: float = field(default_factory=lambda: _float("AERO_STALE_AFTER_S", 60.0))
    max_attempts: int = field(default_factory=lambda: _int("AERO_MAX_ATTEMPTS", 3))
    # Redis only: an unacked message is handed out again this long after its delivery.
    visibility_timeout_s: float = field(default_factory=lambda: _float("AERO_VISIBILITY_TIMEOUT_S", 3600.0))
    # Redis only: how often a worker sweeps for messages past their visibility timeout.
    restore_interval_s: float = field(default_factory=lambda: _float("AERO_RESTORE_INTERVAL_S", 10.0))
    # Embedded broker only: how often an idle worker polls the SQLite message table.
    broker_poll_s: float = field(default_factory=lambda: _float("AERO_BROKER_POLL_S", 0.5))
    reaper_interval_s: float = field(default_factory=lambda: _float("AERO_REAPER_INTERVAL_S", 10.0))
    # Metric sink: flush at least this often (and on every checkpoint step and at close); a
    # quarter second keeps a live view within ~0.3 s of the trainer for fast steps too.
    sink_flush_s: float = field(default_factory=lambda: _float("AERO_SINK_FLUSH_S", 0.25))
