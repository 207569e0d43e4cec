"""Who owns a run, and claiming one: what a ``train_run`` task does before any training
(worker/runner.py calls :func:`acquire` first and trains only the run it returns).

Ownership: the ``worker`` column names the process that runs a run, as ``host:pid:start``
(``start`` = the process start time from /proc, so a recycled pid in a restarted container is
not mistaken for the old owner; :func:`worker_identity`, :func:`owner_state`). Every write a
worker makes to its run is conditional on still owning it (worker/runner.py's ``RunControl``).

Fair share: a task message is a *ticket*, not an order for one run. The task for run X claims
the queued run that the claim rule picks on X's queue (``backend.db.fair_share.claim_next``: the
highest priority first; then the fair share: the owner whose running runs hold the fewest GPUs
first, then the fewest running runs, then the one served longest ago, each owner's oldest run
first), which is X itself when X is the only one queued.
Every queued run has one message behind it, so no run is left without one; a message that
finds nothing to claim (its run was cancelled, another message took it) does nothing. The
claimed run records the ticket (``runs.ticket``), so a redelivered message goes back to the run
its first delivery was serving (:func:`acquire`).

Redelivery (Redis visibility timeout, a pool process killed, the reaper re-queueing): a task for
a run that is already ``running`` takes it over only if its owner is gone, i.e. the owner is a
dead process on this host, or its heartbeat is older than ``AERO_STALE_AFTER_S``. For an owner
on another host with a fresh heartbeat it waits: a heartbeat that moves proves the owner alive
(the delivery was a duplicate and is dropped); one that stays still past the stale timeout
means the owner died, and the run resumes here from its last checkpoint (:func:`decide`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Literal

from backend.db import fair_share
from backend.db import runs as repo
from backend.db.models import FINISHED_STATUSES, Run, utcnow
from backend.db.session import get_engine, make_sessionmaker, session_scope
from worker.settings import WorkerSettings

log = logging.getLogger(__name__)

OwnerState = Literal["alive", "dead", "unknown"]


# ---------------------------------------------------------------- who owns a run


def _start_time(pid: int) -> str | None:
    """The process start time in clock ticks since boot (/proc/PID/stat field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # fields after "(comm)" start at field 3


def worker_identity(pid: int | None = None) -> str:
    """``host:pid:start`` of this process (``start`` is empty where /proc does not exist)."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_time(pid) or ''}"


def owner_state(worker: str | None, host: str | None = None) -> OwnerState:
    """Whether the process named by ``worker`` (``host:pid:start``) is alive.

    Only a process on this host can be checked; others are "unknown" (then the heartbeat decides).
    """
    if not worker:
        return "dead"
    parts = worker.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return "unknown"
    owner_host, pid, start = parts[0], int(parts[1]), parts[2]
    if owner_host != (host or socket.gethostname()):
        return "unknown"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "dead"
    except PermissionError:
        pass  # exists, owned by another user
    if start and _start_time(pid) not in (None, start):
        return "dead"  # the pid was recycled by a newer process
    return "alive"


# ---------------------------------------------------------------- acquiring a run


@dataclass(frozen=True)
class Decision:
    action: Literal["claim", "takeover", "fail", "cancel", "skip", "wait"]
    reason: str = ""


def decide(status: str, *, worker: str | None, me: str, owner: OwnerState, heartbeat_age_s: float | None,
           attempts: int, cancel_requested: bool, stale_after_s: float, max_attempts: int) -> Decision:
    """What a task delivered for a run in ``status`` should do (pure; see the module docstring)."""
    if status in FINISHED_STATUSES:
        return Decision("skip", f"run already {status}")
    if status == "queued":
        return Decision("cancel", "cancel requested before it started") if cancel_requested else Decision("claim")
    if worker == me:  # a pool process runs one task at a time: an earlier task here left it unfinished
        return Decision("takeover", "resuming a run this process left unfinished")
    stale = heartbeat_age_s is None or heartbeat_age_s > stale_after_s
    if owner == "alive":
        return Decision("skip", f"running on live worker {worker} (duplicate delivery)")
    if owner == "unknown" and not stale:
        return Decision("wait", f"owner {worker} on another host, heartbeat {heartbeat_age_s:.0f}s old")
    fate = repo.orphan_fate(cancel_requested, attempts, max_attempts)
    if fate == "cancelled":
        return Decision("cancel", "cancel requested while its worker was lost")
    if fate == "failed":
        return Decision("fail", f"worker lost: {worker} vanished mid-run and the run used all {attempts} "
                                f"attempt(s) (AERO_MAX_ATTEMPTS={max_attempts})")
    return Decision("takeover", f"previous worker {worker} is gone ({owner}, heartbeat "
                                f"{'never' if heartbeat_age_s is None else f'{heartbeat_age_s:.0f}s old'})")


def _age_s(ts: datetime | None, now: datetime) -> float | None:
    return None if ts is None else (now - ts).total_seconds()


def _act(url: str, run: Run, d: Decision, me: str, max_attempts: int) -> Run | None:
    """Carry out ``d`` with one compare-and-set transition of backend/db/runs.py; the run, or None."""
    with session_scope(url) as s:
        if d.action == "claim":
            return repo.claim_run(s, run.id, me)
        if d.action == "takeover":
            return repo.take_over(s, run.id, run.worker, me)
        if run.status == "queued":  # cancel before it started
            repo.cancel_queued(s, run.id)
        else:  # cancel | fail: end a run whose worker vanished
            repo.release_orphan(s, run, f"{run.worker} vanished mid-run", max_attempts)
    return None


def _claim_fair(url: str, ticket: int, me: str, queue: str | None, running_cap: int,
                gpu_cap: int = 0) -> tuple[Run | None, str]:
    """The ticket's fresh delivery: cancel its own run if that was cancelled while queued, then
    claim the run the fair-share rule picks on the ticket's queue."""
    note = ""
    with session_scope(url) as s:
        own = s.get(Run, ticket)
        if own is not None:
            queue = own.queue
            if own.status == "queued" and own.cancel_requested and repo.cancel_queued(s, ticket):
                note = f"run {ticket} cancelled: cancel requested before it started; "
    if queue is None:
        return None, f"run {ticket} does not exist and the message named no queue"
    with make_sessionmaker(get_engine(url))() as s:  # not session_scope: claim_next commits its reads itself
        run = fair_share.claim_next(s, queue, me, ticket, running_cap, gpu_cap=gpu_cap)
        s.commit()
    if run is None:
        return None, f"{note}no queued run on {queue} to take (ticket {ticket})"
    return run, "claimed" if run.id == ticket else f"claimed by fair share (ticket {ticket})"


def acquire(url: str, run_id: int, me: str, ws: WorkerSettings,
            sleep: Callable[[float], None] = time.sleep, now: Callable[[], datetime] = utcnow,
            queue: str | None = None, running_cap: int = 0, gpu_cap: int = 0) -> tuple[Run | None, str]:
    """Serve the ticket ``run_id`` in process ``me``: go back to the running run this message
    was serving if its first delivery's worker is gone (takeover), else claim the queued run the
    fair-share rule picks on the ticket's queue (``queue`` when the ticket's run no longer
    exists); owners at ``running_cap`` running runs, or whose running runs' GPUs plus the next
    run's would pass ``gpu_cap``, are skipped. Returns (run, why) with run None
    when there is nothing to run (nothing queued, owned by a live worker, failed for lack of
    attempts). ``sleep`` and ``now`` are injectable for tests."""
    first_beat: Any = ...
    while True:
        # Read and write in separate transactions: on SQLite (WAL) a read transaction that then
        # writes fails at once if another process wrote in between. Every write is a CAS anyway.
        with session_scope(url) as s:
            run = fair_share.run_of_ticket(s, run_id)
        if run is None:
            return _claim_fair(url, run_id, me, queue, running_cap, gpu_cap)
        age = _age_s(run.heartbeat_at, now())
        d = decide(run.status, worker=run.worker, me=me, owner=owner_state(run.worker), heartbeat_age_s=age,
                   attempts=run.attempts, cancel_requested=run.cancel_requested,
                   stale_after_s=ws.stale_after_s, max_attempts=ws.max_attempts)
        if d.action == "wait" and first_beat is not ... and run.heartbeat_at != first_beat:
            return None, f"running on live worker {run.worker}: its heartbeat moved (duplicate delivery)"
        if d.action == "skip":
            return None, d.reason
        if d.action == "wait":
            first_beat = run.heartbeat_at
            wait = max(0.1, min(ws.heartbeat_s, ws.stale_after_s - (age or 0.0) + 0.1))
            log.info("run %s: %s; re-checking in %.1fs", run_id, d.reason, wait)
            sleep(wait)
            continue
        got = _act(url, run, d, me, ws.max_attempts)
        if d.action in ("cancel", "fail"):
            return None, d.reason
        if got is not None:
            return got, "claimed" if d.action == "claim" else d.reason
        # The CAS lost (cancelled, re-queued by the reaper, taken by another delivery): decide again.


__all__ = ["OwnerState", "worker_identity", "owner_state", "Decision", "decide", "acquire"]
