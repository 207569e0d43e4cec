"""Runs: creation, queries, and the guarded state machine that the API and workers share.

State machine (every status change goes through :func:`transition`)::

    queued  --claim-->    running   --finish-->  succeeded | failed | cancelled
    queued  --cancel-->   cancelled              (never started)
    queued  --fail-->     failed                 (e.g. could not be enqueued)
    running --claim-->    running                (redelivered task takes the run over; attempts += 1)
    running --requeue-->  queued                 (stale heartbeat: worker vanished)

Finished runs (succeeded, failed, cancelled) never change status again. Each transition is
one conditional ``UPDATE ... WHERE status IN (allowed sources)``, so two workers racing for
the same run cannot both win, and the write comes first in its transaction (see
backend/db/session.py on SQLite). Callers commit.

Worker usage, one short transaction each::

    with session_scope(url) as s:
        run = claim_run(s, run_id, worker="host:pid")        # None -> nothing to do
    ...
    with session_scope(url) as s:
        stop = record_progress(s, run_id, step, total)       # True -> cancel requested
    ...
    with session_scope(url) as s:
        mark_succeeded(s, run_id)   # or mark_failed(s, run_id, error) / mark_cancelled(s, run_id)
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import Select, delete, exists, func, literal, select, type_coerce, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from backend.db.models import FINISHED_STATUSES, RUN_STATUSES, Checkpoint, EvalResult, Run, StepMetric, utcnow

TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"running", "cancelled", "failed"}),
    "running": frozenset({"running", "succeeded", "failed", "cancelled", "queued"}),
    "succeeded": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
}


class RunNotFound(LookupError):
    def __init__(self, run_id: int):
        self.run_id = run_id
        super().__init__(f"run {run_id} not found")


class RunConflict(RuntimeError):
    """The run's current status does not allow the requested change."""

    def __init__(self, run_id: int, status: str, action: str):
        self.run_id, self.status, self.action = run_id, status, action
        super().__init__(f"run {run_id} is {status}: cannot {action}")


class InvalidTransition(RunConflict):
    def __init__(self, run_id: int, src: str, dst: str):
        super().__init__(run_id, src, f"go from {src} to {dst}")
        self.src, self.dst = src, dst


def can_transition(src: str, dst: str) -> bool:
    """Whether the state machine allows ``src -> dst``."""
    return dst in TRANSITIONS.get(src, frozenset())


def sources_of(dst: str) -> list[str]:
    """Statuses from which ``dst`` may be reached."""
    return [s for s in RUN_STATUSES if can_transition(s, dst)]


def _side_effects(dst: str) -> dict[str, Any]:
    now = utcnow()
    if dst == "running":
        return {"heartbeat_at": now, "started_at": func.coalesce(Run.started_at, now), "attempts": Run.attempts + 1}
    if dst == "queued":
        return {"worker": None, "heartbeat_at": None}
    return {"finished_at": now}  # a finished status


def transition(session: Session, run_id: int, dst: str, *, only_from: Sequence[str] | None = None, **fields: Any) -> Run:
    """Move run ``run_id`` to status ``dst`` and set ``fields``, atomically.

    ``only_from`` narrows the allowed sources further (e.g. ``["queued"]``). Raises
    :class:`RunNotFound`, or :class:`InvalidTransition` when the current status may not go to
    ``dst``. Returns the refreshed run.
    """
    if dst not in TRANSITIONS:
        raise ValueError(f"unknown status {dst!r}")
    allowed = [s for s in sources_of(dst) if only_from is None or s in only_from]
    values = {"status": dst, **_side_effects(dst), **fields}
    result = session.execute(update(Run).where(Run.id == run_id, Run.status.in_(allowed)).values(**values))
    if result.rowcount != 1:
        current = session.scalar(select(Run.status).where(Run.id == run_id))
        if current is None:
            raise RunNotFound(run_id)
        raise InvalidTransition(run_id, current, dst)
    return get_run(session, run_id, refresh=True)


# ---------------------------------------------------------------- worker-side helpers


def claim_run(session: Session, run_id: int, worker: str) -> Run | None:
    """A worker takes run ``run_id`` (queued, or running after a redelivery); attempts += 1.

    Returns None when there is nothing to do: the run is finished, or it was queued with a
    cancel request (then it is marked cancelled here). Raises :class:`RunNotFound`.
    """
    cancelled = session.execute(
        update(Run)
        .where(Run.id == run_id, Run.status == "queued", Run.cancel_requested.is_(True))
        .values(status="cancelled", finished_at=utcnow())
    )
    if cancelled.rowcount == 1:
        return None
    try:
        return transition(session, run_id, "running", worker=worker, error=None)
    except InvalidTransition:
        return None


def record_progress(session: Session, run_id: int, step: int, total_steps: int | None = None, worker: str | None = None) -> bool:
    """After a training step: store ``current_step``, ``progress`` and a heartbeat.

    Returns True when a cancel was requested (the worker should stop within this step).
    Only touches running runs; a run that is no longer running also answers True.
    """
    values: dict[str, Any] = {"current_step": step, "heartbeat_at": utcnow()}
    if total_steps:
        values["progress"] = min(1.0, step / total_steps)
        values["total_steps"] = total_steps
    return _touch_running(session, run_id, values, worker)


def _touch_running(session: Session, run_id: int, values: dict[str, Any], worker: str | None) -> bool:
    """Update a running run; True when a cancel was requested or the run is no longer running."""
    if worker is not None:
        values["worker"] = worker
    row = session.execute(
        update(Run).where(Run.id == run_id, Run.status == "running").values(**values).returning(Run.cancel_requested)
    ).first()
    return True if row is None else bool(row[0])


def heartbeat(session: Session, run_id: int, worker: str | None = None) -> bool:
    """Refresh the heartbeat of a running run (e.g. during a long step or an eval).
    Returns True when a cancel was requested or the run is no longer running."""
    return _touch_running(session, run_id, {"heartbeat_at": utcnow()}, worker)


def is_cancel_requested(session: Session, run_id: int) -> bool:
    return bool(session.scalar(select(Run.cancel_requested).where(Run.id == run_id)))


def mark_succeeded(session: Session, run_id: int) -> Run:
    return transition(session, run_id, "succeeded", progress=1.0)


def mark_failed(session: Session, run_id: int, error: str) -> Run:
    """Fail a queued or running run with its error text (truncated to 20,000 characters)."""
    return transition(session, run_id, "failed", error=error[-20_000:])


def mark_cancelled(session: Session, run_id: int) -> Run:
    return transition(session, run_id, "cancelled", cancel_requested=True)


def requeue(session: Session, run_id: int, reason: str = "") -> Run:
    """running -> queued (the caller re-sends the task with backend.queue.enqueue_run)."""
    return transition(session, run_id, "queued", error=reason or None)


def stale_runs(session: Session, older_than_s: float) -> list[Run]:
    """Running runs whose heartbeat (or start) is older than ``older_than_s`` seconds."""
    cutoff = utcnow() - timedelta(seconds=older_than_s)
    last_seen = func.coalesce(Run.heartbeat_at, Run.started_at, Run.created_at)
    return list(session.scalars(select(Run).where(Run.status == "running", last_seen < cutoff).order_by(Run.id)))


def recover_stale_runs(session: Session, older_than_s: float, max_attempts: int = 3) -> list[tuple[int, str]]:
    """Never leave a run 'running' forever: each stale run is re-queued, or failed once it has
    used ``max_attempts`` attempts, or cancelled if a cancel was requested.

    Returns [(run_id, new status)]; re-queued runs must be re-sent by the caller. The update is
    conditional on the heartbeat still being stale, so a worker that just beat keeps its run.
    """
    out: list[tuple[int, str]] = []
    cutoff = utcnow() - timedelta(seconds=older_than_s)
    still_stale = func.coalesce(Run.heartbeat_at, Run.started_at, Run.created_at) < cutoff
    for run in stale_runs(session, older_than_s):
        if run.cancel_requested:
            dst, fields = "cancelled", {}
        elif run.attempts >= max_attempts:
            dst = "failed"
            fields = {"error": f"worker lost: no heartbeat for {older_than_s:g} s after {run.attempts} attempt(s)"}
        else:
            dst, fields = "queued", {"error": f"re-queued: worker {run.worker} lost (no heartbeat for {older_than_s:g} s)"}
        values = {"status": dst, **_side_effects(dst), **fields}
        res = session.execute(update(Run).where(Run.id == run.id, Run.status == "running", still_stale).values(**values))
        if res.rowcount == 1:
            out.append((run.id, dst))
    return out


# ---------------------------------------------------------------- API-side helpers


def create_run(
    session: Session,
    config: dict[str, Any],
    *,
    queue: str,
    name: str | None = None,
    tags: Sequence[str] = (),
    notes: str = "",
    sweep_id: int | None = None,
) -> Run:
    """Insert a queued run. ``config`` is a validated RunConfig as JSON (``model_dump(mode='json')``)."""
    run = Run(
        name=name or config.get("name") or f"{config['method']}-seed{config['seed']}",
        method=config["method"],
        engine=config["engine"],
        config=config,
        status="queued",
        queue=queue,
        total_steps=int(config.get("steps", 0)),
        tags=list(dict.fromkeys(tags)),
        notes=notes,
        sweep_id=sweep_id,
    )
    session.add(run)
    session.flush()
    return run


def get_run(session: Session, run_id: int, *, refresh: bool = False) -> Run:
    """The run, or :class:`RunNotFound`. ``refresh`` re-reads it after a bulk UPDATE."""
    run = session.get(Run, run_id, populate_existing=refresh)
    if run is None:
        raise RunNotFound(run_id)
    return run


def _has_tag(session: Session, tag: str):
    """Portable "tags JSON list contains tag": JSONB containment on PostgreSQL, json_each on SQLite."""
    if session.get_bind().dialect.name == "postgresql":
        return type_coerce(Run.tags, JSONB).contains([tag])
    each = func.json_each(Run.tags).table_valued("value")
    return exists(select(literal(1)).select_from(each).where(each.c.value == tag))


def _filtered(session: Session, stmt: Select, status, method, tag, sweep_id) -> Select:
    if status:
        stmt = stmt.where(Run.status.in_([status] if isinstance(status, str) else list(status)))
    if method:
        stmt = stmt.where(Run.method.in_([method] if isinstance(method, str) else list(method)))
    if tag:
        stmt = stmt.where(_has_tag(session, tag))
    if sweep_id is not None:
        stmt = stmt.where(Run.sweep_id == sweep_id)
    return stmt


def list_runs(
    session: Session,
    *,
    status: str | Sequence[str] | None = None,
    method: str | Sequence[str] | None = None,
    tag: str | None = None,
    sweep_id: int | None = None,
    limit: int = 50,
    offset: int = 0,
) -> tuple[list[Run], int]:
    """Runs matching every given filter, newest first, and the total count before paging."""
    total = session.scalar(_filtered(session, select(func.count(Run.id)), status, method, tag, sweep_id)) or 0
    stmt = _filtered(session, select(Run), status, method, tag, sweep_id).order_by(Run.id.desc()).limit(limit).offset(offset)
    return list(session.scalars(stmt)), total


def update_run(session: Session, run_id: int, *, tags: Sequence[str] | None = None, notes: str | None = None) -> Run:
    """Replace tags and/or notes (any status)."""
    run = get_run(session, run_id)
    if tags is not None:
        run.tags = list(dict.fromkeys(tags))
    if notes is not None:
        run.notes = notes
    session.flush()
    return run


def request_cancel(session: Session, run_id: int) -> Run:
    """Cancel: a queued run is cancelled at once; a running one gets ``cancel_requested`` and its
    worker stops within one step. Raises :class:`RunConflict` for finished runs."""
    now = utcnow()
    res = session.execute(
        update(Run).where(Run.id == run_id, Run.status == "queued").values(status="cancelled", cancel_requested=True, finished_at=now)
    )
    if res.rowcount == 0:
        res = session.execute(update(Run).where(Run.id == run_id, Run.status == "running").values(cancel_requested=True))
    if res.rowcount == 0:
        current = session.scalar(select(Run.status).where(Run.id == run_id))
        if current is None:
            raise RunNotFound(run_id)
        raise RunConflict(run_id, current, "cancel a finished run")
    return get_run(session, run_id, refresh=True)


def delete_run(session: Session, run_id: int) -> None:
    """Delete a finished run with its metrics, evals and checkpoint rows (files stay on disk).
    Raises :class:`RunConflict` for queued or running runs."""
    status = session.scalar(select(Run.status).where(Run.id == run_id))
    if status is None:
        raise RunNotFound(run_id)
    if status not in FINISHED_STATUSES:
        raise RunConflict(run_id, status, "delete a run that has not finished (cancel it first)")
    for model in (StepMetric, EvalResult, Checkpoint):
        session.execute(delete(model).where(model.run_id == run_id))
    res = session.execute(delete(Run).where(Run.id == run_id, Run.status.in_(FINISHED_STATUSES)))
    if res.rowcount != 1:  # it changed under us
        raise RunConflict(run_id, status, "delete")


def runs_by_status(session: Session) -> dict[str, int]:
    """Count of runs per status (every status present, zeros included)."""
    counts = dict(session.execute(select(Run.status, func.count(Run.id)).group_by(Run.status)).all())
    return {s: int(counts.get(s, 0)) for s in RUN_STATUSES}


__all__ = [
    "TRANSITIONS", "RunNotFound", "RunConflict", "InvalidTransition", "can_transition", "sources_of", "transition",
    "claim_run", "record_progress", "heartbeat", "is_cancel_requested", "mark_succeeded", "mark_failed",
    "mark_cancelled", "requeue", "stale_runs", "recover_stale_runs", "create_run", "get_run", "list_runs",
    "update_run", "request_cancel", "delete_run", "runs_by_status",
]
