"""The reaper: no run stays "running" after its worker vanished.

Every ``AERO_REAPER_INTERVAL_S`` seconds it looks at running runs and treats as orphaned:

1. a run whose owner process is on this host and is gone (checked by pid and start time):
   recovered at the next sweep, without waiting for a heartbeat timeout (the embedded
   ``aero up`` case, where the worker and the reaper share a host);
2. a run whose heartbeat is older than ``AERO_STALE_AFTER_S`` (any host).

An orphan is re-queued and its task re-sent (it resumes from its last checkpoint) while it
has attempts left (< ``AERO_MAX_ATTEMPTS``), failed with a clear error when it has none, and
cancelled if a cancel was requested (``backend.db.runs.orphan_fate``, the rule the worker's
takeover follows too). Each change is a compare-and-set on the status, the owner and what the
fate was decided from (``backend.db.runs.release_orphan``), so a worker that beats in the
meantime, or a task that Redis redelivered and that took the run over first, keeps it.

Run it with ``python -m worker.reaper`` (``aero up`` and docker-compose do).
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Callable

from sqlalchemy import select

from backend.db.models import Run
from backend.db.runs import recover_stale_runs, release_orphan
from backend.db.session import session_scope
from backend.settings import Settings, get_settings
from worker.runner import owner_state
from worker.settings import WorkerSettings

log = logging.getLogger("worker.reaper")


def recover_dead_owners(url: str, max_attempts: int, host: str | None = None) -> list[tuple[int, str]]:
    """Running runs whose owner is a dead process on this host: ``release_orphan`` each (re-queue,
    fail or cancel). Returns [(run_id, new status)]. Reads first, then one short write transaction
    per run (a SQLite read transaction that turns into a write fails if another process wrote meanwhile)."""
    with session_scope(url) as s:
        running = list(s.scalars(select(Run).where(Run.status == "running").order_by(Run.id)))
    out: list[tuple[int, str]] = []
    for run in running:
        if owner_state(run.worker, host) != "dead":
            continue
        with session_scope(url) as s:
            dst = release_orphan(s, run, f"worker process {run.worker} died", max_attempts)
        if dst is not None:
            out.append((run.id, dst))
    return out


def default_enqueue(settings: Settings) -> Callable[[int], None]:
    from backend.queue import enqueue_run

    def send(run_id: int) -> None:
        with session_scope(settings.database_url) as s:
            run = s.get(Run, run_id)
            queue = run.queue if run is not None and run.status == "queued" else None
        if queue is not None:
            enqueue_run(settings, run_id, queue)

    return send


class Reaper:
    """One sweep per ``sweep()``; re-sends tasks that could not be sent last time (broker down)."""

    def __init__(self, settings: Settings | None = None, ws: WorkerSettings | None = None,
                 enqueue: Callable[[int], None] | None = None):
        self.settings, self.ws = settings or get_settings(), ws or WorkerSettings()
        self.enqueue = enqueue or default_enqueue(self.settings)
        self.unsent: set[int] = set()

    def sweep(self) -> list[tuple[int, str]]:
        url = self.settings.database_url
        changed = recover_dead_owners(url, self.ws.max_attempts)
        with session_scope(url) as s:
            changed += recover_stale_runs(s, self.ws.stale_after_s, self.ws.max_attempts)
        for run_id, status in changed:
            log.warning("run %s: worker lost -> %s", run_id, status)
        self.unsent |= {run_id for run_id, status in changed if status == "queued"}
        for run_id in sorted(self.unsent):
            try:
                self.enqueue(run_id)
                self.unsent.discard(run_id)
            except Exception:  # noqa: BLE001  (broker unreachable: retry next sweep)
                log.warning("run %s: could not re-send its task; retrying next sweep", run_id, exc_info=True)
        return changed

    def loop(self, interval_s: float | None = None, alive_file: Path | None = None,
             stop: Callable[[], bool] = lambda: False) -> None:
        interval_s = interval_s or self.ws.reaper_interval_s
        while not stop():
            try:
                self.sweep()
                if alive_file is not None:
                    alive_file.touch()
            except Exception:  # noqa: BLE001  (store briefly unavailable: keep sweeping)
                log.warning("reaper sweep failed", exc_info=True)
            time.sleep(interval_s)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Re-queue or fail runs whose worker vanished.")
    p.add_argument("--interval", type=float, default=None, help="seconds between sweeps (AERO_REAPER_INTERVAL_S)")
    p.add_argument("--once", action="store_true", help="one sweep, then exit")
    p.add_argument("--alive-file", type=Path, default=None, help="touched after each sweep (container healthcheck)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    reaper = Reaper()
    if args.once:
        for run_id, status in reaper.sweep():
            print(f"run {run_id}: {status}")
        return
    log.info("reaper: stale after %.0fs, sweep every %.0fs, max attempts %d", reaper.ws.stale_after_s,
             args.interval or reaper.ws.reaper_interval_s, reaper.ws.max_attempts)
    reaper.loop(args.interval, args.alive_file)


if __name__ == "__main__":
    main()
