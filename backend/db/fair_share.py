"""Which queued run a worker claims next (priority first, then the fair share, weighted by the
GPUs each owner's running runs hold) and which run a task message serves. The status write itself is :func:`backend.db.runs.claim_run`'s compare-and-set."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.models import Run
from backend.db.runs import claim_run


def fair_order(queued_heads: dict[str | None, int], gpus_held: dict[str | None, int], running: dict[str | None, int],
               last_served: dict[str | None, datetime | None], running_cap: int = 0,
               priority: dict[int, int] | None = None) -> list[int]:
    """The claim rule, pure: the run ids to try, best first, one per owner with queued runs.

    ``queued_heads`` maps each owner with queued runs to the run of theirs that goes next (their
    highest-priority queued run, the oldest of those); ``priority`` maps those runs to their
    priority (absent: 0); ``gpus_held`` the GPUs the owner's running runs hold (``runs.gpus``);
    ``running`` the owner's running runs; ``last_served`` when a run of the owner last started.

    A higher priority goes first, whoever owns it: the submitter's role caps it
    (backend/services/priority.py), so it is the operator's lever, not the fair share's. Among
    equal priorities the fair share is weighted by GPUs held, not by runs: the owner whose running
    runs hold the fewest GPUs first (one 4-GPU run has had as much of the box as four 1-GPU runs;
    counting runs would let its owner claim again ahead of a user holding two), then the fewest
    running runs (CPU runs hold no GPU: on a CPU queue this is round robin by runs), then the owner
    served longest ago (never served first), then the owner whose head run is oldest. Owners
    already at ``running_cap`` (> 0) running runs are left out: their runs wait. Runs stored before
    users existed (owner None) count as one more owner."""
    never, prio = datetime.min, priority or {}
    eligible = [o for o in queued_heads if not running_cap or running.get(o, 0) < running_cap]
    eligible.sort(key=lambda o: (-prio.get(queued_heads[o], 0), gpus_held.get(o, 0), running.get(o, 0),
                                 last_served.get(o) or never, queued_heads[o]))
    return [queued_heads[o] for o in eligible]


def queued_heads(session: Session, queue: str) -> tuple[dict[str | None, int], dict[int, int]]:
    """({owner: the run of theirs that goes next}, {that run: its priority}) over ``queue``'s queued
    runs without a cancel request: each owner's highest priority, the oldest (lowest id) run of it."""
    rows = session.execute(select(Run.owner, Run.priority, func.min(Run.id)).where(
        Run.queue == queue, Run.status == "queued", Run.cancel_requested.is_(False)).group_by(Run.owner, Run.priority)).all()
    best: dict[str | None, tuple[int, int]] = {}
    for owner, prio, head in rows:
        if owner not in best or int(prio or 0) > best[owner][0]:
            best[owner] = (int(prio or 0), head)
    return {o: h for o, (_, h) in best.items()}, {h: p for p, h in best.values()}


def fair_candidates(session: Session, queue: str, running_cap: int = 0, gpu_cap: int = 0) -> list[int]:
    """:func:`fair_order` over the store's queued and running runs of ``queue`` (three grouped reads;
    one more with ``gpu_cap``: owners whose running runs' GPUs plus their next run's would pass it
    are left out, so that run waits)."""
    heads, prio = queued_heads(session, queue)
    if not heads:
        return []
    rows = session.execute(select(Run.owner, func.coalesce(func.sum(Run.gpus), 0), func.count(Run.id)).where(
        Run.status == "running").group_by(Run.owner)).all()
    held = {o: int(g or 0) for o, g, _ in rows}
    running = {o: int(n) for o, _, n in rows}
    if gpu_cap:
        asks = dict(session.execute(select(Run.id, Run.gpus).where(Run.id.in_(list(heads.values())))).all())
        heads = {o: h for o, h in heads.items() if held.get(o, 0) + asks.get(h, 0) <= gpu_cap}
        if not heads:
            return []
    named = [o for o in heads if o is not None]
    of_heads = Run.owner.in_(named) | Run.owner.is_(None) if None in heads else Run.owner.in_(named)
    served = dict(session.execute(select(Run.owner, func.max(Run.started_at)).where(
        Run.queue == queue, Run.started_at.is_not(None), of_heads).group_by(Run.owner)).all())
    return fair_order(heads, held, running, served, running_cap, prio)


def claim_next(session: Session, queue: str, worker: str, ticket: int, running_cap: int = 0,
               tries: int = 20, gpu_cap: int = 0) -> Run | None:
    """Claim for ``worker`` the queued run of ``queue`` the claim rule picks (:func:`fair_order`:
    priority, then the fair share by GPUs held),
    recording ``ticket``; None when no run is eligible. Race-safe: each attempt is the compare-and-set
    of :func:`claim_run` (``UPDATE ... WHERE status = 'queued'``), and a worker that loses a race
    re-reads the queue and picks again (PostgreSQL's row lock or SQLite's single writer decides).

    Commits the session's reads before claiming: the claim's transaction then starts with its
    write, which on SQLite waits for the writer lock instead of failing at once (a read
    transaction that turns into a write fails if another process wrote meanwhile; see
    backend/db/session.py). The caller commits the claim."""
    for _ in range(tries):
        candidates = fair_candidates(session, queue, running_cap, gpu_cap)
        session.commit()
        if not candidates:
            return None
        for run_id in candidates:
            run = claim_run(session, run_id, worker, ticket=ticket)
            if run is not None:
                return run
    return None


def run_of_ticket(session: Session, ticket: int) -> Run | None:
    """The running run a task message (``ticket``) is serving, or None: a redelivered message
    goes back to the run its first delivery claimed. Runs claimed before tickets existed
    (ticket None) are served by their own id's message."""
    stmt = select(Run).where(Run.status == "running", (Run.ticket == ticket) | ((Run.ticket.is_(None)) & (Run.id == ticket)))
    return session.scalars(stmt.order_by(Run.id).limit(1)).first()
