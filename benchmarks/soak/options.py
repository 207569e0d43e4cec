"""The soak's options (one per command-line flag), the fault kinds, and its progress log."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

FAULT_KINDS = ("worker_kill", "redis_restart", "pg_restart", "api_kill", "disk_full", "ckpt_truncate")
SERVERLESS_FAULTS = ("worker_kill", "api_kill", "disk_full", "ckpt_truncate")  # --store sqlite


@dataclass
class Options:
    store: str = "postgres"  # postgres (own cluster + own Redis) | sqlite (embedded store and broker)
    database_url: str | None = None  # an existing PostgreSQL store instead of an own cluster
    workers: int = 4
    users: int = 5
    runs: int = 200
    sse: int = 50
    pollers: int = 20
    steps: int = 4
    batch_prompts: int = 4
    faults: dict[str, int] = field(default_factory=dict)  # kind -> count; empty = 2 of each that applies
    seed: int = 0
    pg_port: int = 5441
    redis_port: int = 6391
    api_port: int = 0
    redis_persistence: str = "aof"
    tmpfs_mb: int = 512
    disk_full_s: float = 4.0
    flood_s: float = 3.0
    flood_rps: float = 1000.0
    # per API process: a 2-core box with 4 workers training sends ~140 requests/s, not 1,000, so a
    # limit the flood exceeds (2 processes x 20/s + bursts of 40) is what makes it a test of the limiter
    rate_limit: float = 20.0
    max_body_bytes: int = 65536
    api_workers: int = 2  # API processes (backend.serve --workers), as the compose file runs it
    worker_nice: int | None = None  # AERO_WORKER_NICE of the workers; None = the platform's default
    poll_interval_s: float = 0.5
    user_stagger_s: float = 2.0
    duration_s: float = 0.0  # 0 = from the number of faults
    grace_s: float = 5.0
    stale_after_s: float = 15.0
    visibility_timeout_s: float = 30.0
    max_attempts: int = 10
    timeout_s: float = 0.0  # 0 = from the sizes
    base_dir: str | None = None
    keep: bool = False
    quiet: bool = False

    def duration(self) -> float:
        """How long submissions and faults are spread over (the runs then drain)."""
        return self.duration_s or max(60.0, 15.0 * sum(self.fault_plan().values()) + 30.0)

    def fault_plan(self) -> dict[str, int]:
        kinds = SERVERLESS_FAULTS if self.store == "sqlite" else FAULT_KINDS
        plan = dict(self.faults) if self.faults else {k: 2 for k in kinds}
        if self.database_url:
            plan.pop("pg_restart", None)
        return {k: n for k, n in plan.items() if k in kinds and n > 0}


def log(opts: Options, msg: str) -> None:
    if not opts.quiet:
        print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)
