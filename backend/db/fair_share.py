"""Which queued run a worker claims next (the fair-share rule) and which run a task message
serves. The status write itself is :func:`backend.db.runs.claim_run`'s compare-and-set."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.models import Run
from backend.db.runs import claim_run


def fair_order(queued_heads: dict[str | None, int], running: dict[str | None, int],
               last_served: dict[str | None, datetime], running_cap: int = 0) -> list[int]:
    """The fair-share rule, pure: the run ids to try, best first, one per owner with queued runs.

    ``queued_heads`` maps each owner with queued runs to their oldest queued run (lowest id);
    ``running`` the owner's running runs; ``last_served`` when a run of the owner last started.
    Owners are taken round-robin: fewest running runs first, then the one served longest ago
    (never served first), then the owner whose oldest queued run is oldest. Owners already at
    ``running_cap`` (> 0) running runs are left out: their runs wait. Runs stored before users
    existed (owner None) count as one more owner."""
    never = datetime.min
    eligible = [o for o in queued_heads if not running_cap or running.get(o, 0) < running_cap]
    eligible.sort(key=lambda o: (running.get(o, 0), last_served.get(o) or never, queued_heads[o]))
    return [queued_heads[o] for o in eligible]


def fair_candidates(session: Session, queue: str, running_cap: int = 0, gpu_cap: int = 0) -> list[int]:
    """:func:`fair_order` over the store's queued and running runs of ``queue`` (three grouped reads;
    two more with ``gpu_cap``: owners whose running runs' GPUs plus their next run's would pass it
    are left out, so that run waits)."""
    q = Run.queue == queue
    heads = dict(session.execute(select(Run.owner, func.min(Run.id)).where(
        q, Run.status == "queued", Run.cancel_requested.is_(False)).group_by(Run.owner)).all())
    if gpu_cap and heads:
        held = dict(session.execute(select(Run.owner, func.sum(Run.gpus)).where(
            Run.status == "running").group_by(Run.owner)).all())
        asks = dict(session.execute(select(Run.id, Run.gpus).where(Run.id.in_(list(heads.values())))).all())
        heads = {o: h for o, h in heads.items() if int(held.get(o) or 0) + asks.get(h, 0) <= gpu_cap}
    if not heads:
        return []
    running = dict(session.execute(select(Run.owner, func.count(Run.id)).where(
        Run.status == "running").group_by(Run.owner)).all())
    named = [o for o in heads if o is not None]
    of_heads = Run.owner.in_(named) | Run.owner.is_(None) if None in heads else Run.owner.in_(named)
    served = dict(session.execute(select(Run.owner, func.max(Run.started_at)).where(
        q, Run.started_at.is_not(None), of_heads).group_by(Run.owner)).all())
    return fair_order(heads, running, served, running_cap)


def claim_next(session: Session, queue: str, worker: str, ticket: int, running_cap: int = 0,
               tries: int = 20, gpu_cap: int = 0) -> Run | None:
    """Claim for ``worker`` the queued run of ``queue`` the fair-share rule picks (:func:`fair_order`),
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
