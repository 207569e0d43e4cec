"""Worker-side knobs, read from the environment once per process.

The store and broker URLs come from ``backend.settings`` (DATABASE_URL, REDIS_URL, AERO_DATA_DIR);
this module holds only what the worker, heartbeat and reaper add on top. Every default is chosen
for a laptop; docs/deploy.md explains how they interact (redelivery timing).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from trainer.platform.reservations import starvation_limit


def _float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        raise ValueError(f"{name} must be a number; got {os.environ[name]!r}") from None


def _int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        raise ValueError(f"{name} must be an integer; got {os.environ[name]!r}") from None


DEFAULT_NICE = 10  # AERO_WORKER_NICE
MISSING_CHECKPOINT_CHOICES = ("auto", "restart", "fail")  # AERO_MISSING_CHECKPOINT


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
    # CPU priority of the processes that train (Unix niceness, 0-19). Training takes every core it
    # can get; where the API, the dashboard or the store share the host, a positive niceness lets
    # them answer first and training takes the rest (it loses nothing on a host with cores to spare).
    # 0 leaves the worker at its parent's priority.
    nice: int = field(default_factory=lambda: _int("AERO_WORKER_NICE", DEFAULT_NICE))
    # A run resumed here whose newest checkpoint in the store is not in this host's run directory
    # (a run directory not shared between worker hosts): "restart" drops the store's steps after
    # what is here and trains them again; "fail" fails the run naming the host and the path;
    # "auto" (the default) is "fail" for a multi-node run, whose steps are the costliest to
    # re-train silently, and "restart" otherwise (:func:`missing_checkpoint_mode`).
    missing_checkpoint: str = field(
        default_factory=lambda: os.environ.get("AERO_MISSING_CHECKPOINT", "auto").strip().lower())
    # A run asking for several GPUs that has waited this long for them makes the runs asking for
    # fewer hold back until it is placed (trainer/platform/reservations.py, which reads it in the run's own
    # process; parsed here too, so a bad value stops the worker at start naming it). 0 = off.
    starvation_s: float = field(default_factory=starvation_limit)

    def missing_checkpoint_mode(self, nodes: int) -> str:
        """What a lost checkpoint does to a run on ``nodes`` nodes: "restart" or "fail"."""
        if self.missing_checkpoint != "auto":
            return self.missing_checkpoint
        return "fail" if nodes > 1 else "restart"

    def __post_init__(self) -> None:
        # checked where every worker process starts (make_app), so a bad value stops the worker
        # with its name instead of failing in each pool process it forks
        if not 0 <= self.nice <= 19:
            raise ValueError(f"AERO_WORKER_NICE must be 0-19 (a Unix niceness: 0 = the parent's priority); got {self.nice}")
        if self.missing_checkpoint not in MISSING_CHECKPOINT_CHOICES:
            raise ValueError(f"AERO_MISSING_CHECKPOINT must be one of {', '.join(MISSING_CHECKPOINT_CHOICES)}; "
                             f"got {self.missing_checkpoint!r}")
