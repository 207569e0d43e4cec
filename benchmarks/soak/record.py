"""What the load records while the soak runs (fault windows, SSE follows, reads, the flood) and
the clock it is stamped with; the analysis reads it back."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

TERMINAL = ("succeeded", "failed", "cancelled")


def now() -> float:
    return time.time()


@dataclass
class Window:
    kind: str
    start: float
    end: float
    detail: dict = field(default_factory=dict)


@dataclass
class Follow:
    """One SSE client following one run: (step, arrival, connection start) per metrics event."""

    client: int
    run_id: int
    events: list[tuple[int, float, float]] = field(default_factory=list)
    reconnects: int = 0
    reconnects_with_id: int = 0
    reconnect_times: list[float] = field(default_factory=list)
    ended: bool = False
    end_status: str | None = None


@dataclass
class Record:
    t0: float = 0.0
    loadavg_start: float = 0.0
    windows: list[Window] = field(default_factory=list)
    skipped_faults: list[dict] = field(default_factory=list)
    submissions: Counter = field(default_factory=Counter)
    accepted: dict[int, dict] = field(default_factory=dict)  # run id -> {user, t}
    reads: list[tuple[float, float, int | str, str]] = field(default_factory=list)  # (t, seconds, status, user)
    read_app_ms: list[tuple[float, float]] = field(default_factory=list)  # (t, the API's Server-Timing app ms) of 200s
    follows: list[Follow] = field(default_factory=list)
    sse_statuses: Counter = field(default_factory=Counter)
    flood: dict = field(default_factory=dict)
    files: dict[int, dict] = field(default_factory=dict)  # run id -> checkpoint file check
    truncated: dict[int, dict] = field(default_factory=dict)  # run id -> the checkpoint the harness truncated
    runs: dict[int, Any] = field(default_factory=dict)  # the monitor's latest view of the store
    done_submitting: bool = False
    disk_full: bool = False  # while set, the janitor does not delete checkpoints (space must stay full)
    stop: bool = False
