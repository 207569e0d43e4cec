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
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from backend.db.models import Run, utcnow
from backend.db.runs import release_orphan, stale_runs
from backend.db.session import bounded_lock_wait, session_scope
from backend.settings import Settings, get_settings
from worker.claim import owner_state
from worker.settings import WorkerSettings

log = logging.getLogger("worker.reaper")


# How long one release waits for a run's row lock. A holder frozen between its write and its
# commit keeps the lock until PostgreSQL ends its idle transaction (AERO_DB_IDLE_TX_TIMEOUT_S):
# meanwhile the other orphans are still released, and this one is retried next sweep.
LOCK_WAIT_S = 5.0


def _release_each(url: str, runs: list[Run], why: Callable[[Run], str], max_attempts: int,
                  stale_before: datetime | None = None) -> list[tuple[int, str]]:
    """``release_orphan`` each run in its own short write transaction (a SQLite read transaction
    that turns into a write fails if another process wrote meanwhile); a run whose row is locked
    is skipped and logged, the others go on."""
    out: list[tuple[int, str]] = []
    for run in runs:
        try:
            with session_scope(url) as s:
                bounded_lock_wait(s, LOCK_WAIT_S)
                dst = release_orphan(s, run, why(run), max_attempts, stale_before=stale_before)
        except OperationalError as e:
            log.warning("run %s: its row stayed locked for %.0fs (%s); retrying next sweep",
                        run.id, LOCK_WAIT_S, str(e.orig).strip().splitlines()[0] if e.orig else e)
            continue
        if dst is not None:
            out.append((run.id, dst))
    return out


def recover_dead_owners(url: str, max_attempts: int, host: str | None = None) -> list[tuple[int, str]]:
    """Running runs whose owner is a dead process on this host: ``release_orphan`` each (re-queue,
    fail or cancel). Returns [(run_id, new status)]."""
    with session_scope(url) as s:
        running = list(s.scalars(select(Run).where(Run.status == "running").order_by(Run.id)))
    dead = [run for run in running if owner_state(run.worker, host) == "dead"]
    return _release_each(url, dead, lambda run: f"worker process {run.worker} died", max_attempts)


def recover_stale(url: str, stale_after_s: float, max_attempts: int) -> list[tuple[int, str]]:
    """Running runs whose heartbeat is older than ``stale_after_s``: ``release_orphan`` each, on
    condition that the heartbeat is still that old (a worker that just beat keeps its run)."""
    cutoff = utcnow() - timedelta(seconds=stale_after_s)
    with session_scope(url) as s:
        stale = stale_runs(s, stale_after_s)
    return _release_each(url, stale, lambda run: f"worker {run.worker} sent no heartbeat for {stale_after_s:g} s",
                         max_attempts, stale_before=cutoff)


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
        changed += recover_stale(url, self.ws.stale_after_s, self.ws.max_attempts)
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
    log.info("reaper: stale after %.0fs, sweep every %gs, max attempts %d", reaper.ws.stale_after_s,
             args.interval or reaper.ws.reaper_interval_s, reaper.ws.max_attempts)
    reaper.loop(args.interval, args.alive_file)


if __name__ == "__main__":
    main()
