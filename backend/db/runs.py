"""Runs: creation, queries, and the state machine: this module is the only writer of ``status``.

State machine, one function per transition::

    queued  --claim_run-->        running    (a worker starts it; attempts += 1)
    queued  --cancel_queued-->    cancelled  (a cancel was requested before it started)
    queued  --mark_failed-->      failed     (e.g. it could not be enqueued)
    running --take_over-->        running    (a redelivered task replaces a lost owner; attempts += 1)
    running --mark_succeeded | mark_failed | mark_cancelled-->  succeeded | failed | cancelled
    running --release_orphan-->   queued | failed | cancelled   (its worker vanished: orphan_fate)
    queued | running --request_cancel-->  cancelled, or running with cancel_requested (the API)
    failed | cancelled --resume_run-->     queued     (run again from the last checkpoint; the API)

A succeeded run never changes status again; a failed or cancelled one only by ``resume_run``.
Every transition goes through :func:`_move` except ``request_cancel``, which writes the status
and the cancel flag in one ``UPDATE`` of its own (a queued run becomes cancelled, a running one
keeps its status) under the same table of allowed sources. Each transition is
one conditional ``UPDATE ... WHERE status IN (allowed sources) [AND owner ...]`` that reports
whether it applied, so two workers racing for the same run cannot both win, and the write
comes first in its transaction (see backend/db/session.py on SQLite). ``worker`` arguments
make a write conditional on that process still owning the run. Callers commit.

``tests/backend/db/test_status_writers.py`` checks that no other module writes the column.

*Waiting* is not a status: a running run that waits for its GPUs before its first step has
``waiting_for`` set (and ``waiting_since``, when that wait began) by :func:`record_placement`,
both cleared once it is placed or leaves ``running``. Lists show it as ``waiting``
(:data:`WAITING`, :func:`is_waiting`) and the ``status`` filter of :func:`list_runs` takes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import ColumnElement, Select, case, delete, exists, func, literal, select, type_coerce, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from backend.db.models import FINISHED_STATUSES, RUN_STATUSES, AlertEvent, Checkpoint, EvalResult, Run, StepMetric, utcnow
from backend.db.notify import notify_run_changed

TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"running", "cancelled", "failed"}),
    "running": frozenset({"running", "succeeded", "failed", "cancelled", "queued"}),
    "succeeded": frozenset(),
    "failed": frozenset({"queued"}),  # resume_run: run again from the last checkpoint
    "cancelled": frozenset({"queued"}),
}
ERROR_CHARS = 20_000
OrphanFate = Literal["cancelled", "failed", "retry"]
WAITING = "waiting"  # the state lists show a running run that waits for its GPUs in; not a stored status


class RunNotFound(LookupError):
    def __init__(self, run_id: int):
        self.run_id = run_id
        super().__init__(f"run {run_id} not found")


class RunConflict(RuntimeError):
    """The run's current status does not allow the requested change."""

    def __init__(self, run_id: int, status: str, action: str):
        self.run_id, self.status, self.action = run_id, status, action
        super().__init__(f"run {run_id} is {status}: cannot {action}")


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
        return {"worker": None, "heartbeat_at": None, "waiting_for": None, "waiting_since": None}
    return {"finished_at": now, "waiting_for": None, "waiting_since": None}  # a finished status: it waits for nothing


def _owned_by(worker: str | None) -> ColumnElement[bool]:
    return Run.worker.is_(None) if worker is None else Run.worker == worker


def _move(session: Session, run_id: int, dst: str, sources: Sequence[str], *where: ColumnElement[bool],
          **fields: Any) -> bool:
    """The one status write: ``UPDATE runs SET status = dst ... WHERE id AND status IN sources AND where``.
    Sources the table does not allow are a programming error. True when the row changed."""
    bad = [s for s in sources if not can_transition(s, dst)]
    if bad:
        raise ValueError(f"transition {bad} -> {dst} is not in TRANSITIONS")
    stmt = update(Run).where(Run.id == run_id, Run.status.in_(list(sources)), *where)
    moved = session.execute(stmt.values(status=dst, **_side_effects(dst), **fields)).rowcount == 1
    if moved:
        notify_run_changed(session, run_id)
    return moved


# ---------------------------------------------------------------- worker-side transitions


def claim_run(session: Session, run_id: int, worker: str, ticket: int | None = None) -> Run | None:
    """queued -> running for ``worker`` (attempts += 1). None when the run is not queued (another
    delivery won, it finished, it does not exist) or carries a cancel request (see :func:`cancel_queued`).
    Never takes a *running* run: two deliveries racing for one queued run must not both win.
    ``ticket``: the run id the claiming task message named (:func:`claim_next`)."""
    ok = _move(session, run_id, "running", ["queued"], Run.cancel_requested.is_(False), worker=worker, error=None,
               ticket=run_id if ticket is None else ticket)
    return get_run(session, run_id, refresh=True) if ok else None


def cancel_queued(session: Session, run_id: int) -> bool:
    """queued -> cancelled: a queued run whose cancel was requested ends without starting."""
    return _move(session, run_id, "cancelled", ["queued"], cancel_requested=True)


def take_over(session: Session, run_id: int, old_worker: str | None, worker: str) -> Run | None:
    """running -> running under ``worker`` (attempts += 1), only if ``old_worker`` still owns it
    (compare-and-set): the redelivered task of a run whose owner is gone resumes it."""
    ok = _move(session, run_id, "running", ["running"], _owned_by(old_worker), worker=worker, error=None)
    return get_run(session, run_id, refresh=True) if ok else None


def record_progress(session: Session, run_id: int, step: int | None = None, total_steps: int | None = None,
                    worker: str | None = None) -> bool | None:
    """Heartbeat of a running run, with its progress when ``step`` is given; only while ``worker``
    (when given) owns it. Returns the cancel flag (True: stop within this step), or None when the
    run is not running (under ``worker``): the caller lost it. Writes no status."""
    values: dict[str, Any] = {"heartbeat_at": utcnow()}
    if step is not None:
        values["current_step"] = step
        if total_steps:
            values["progress"], values["total_steps"] = min(1.0, step / total_steps), total_steps
    where = [Run.id == run_id, Run.status == "running"] + ([Run.worker == worker] if worker is not None else [])
    row = session.execute(update(Run).where(*where).values(**values).returning(Run.cancel_requested)).first()
    if row is not None and step is not None:
        notify_run_changed(session, run_id)  # progress moved: live views show it
    return None if row is None else bool(row[0])


_UNSET: Any = object()


def record_placement(session: Session, run_id: int, worker: str, *, waiting_for: Any = _UNSET,
                     placement: dict[str, Any] | None = None) -> bool:
    """What the running run of ``worker`` waits for (a text, or None once placed) and where it was
    placed (trainer/platform/placement.py; its GPUs are counted into ``gpus``). ``waiting_since`` keeps when
    the wait began while the text changes (what is free now), and is cleared with it. False when
    the run is no longer ``worker``'s."""
    values: dict[str, Any] = {}
    if waiting_for is not _UNSET:
        values["waiting_for"] = waiting_for
        values["waiting_since"] = None if waiting_for is None else func.coalesce(Run.waiting_since, utcnow())
    if placement is not None:
        values["placement"] = placement
        values["gpus"] = sum(len(ids) for ids in placement.get("gpu_ids", []))
    if not values:
        return True
    ok = session.execute(update(Run).where(Run.id == run_id, Run.status == "running", Run.worker == worker)
                         .values(**values)).rowcount == 1
    if ok:
        notify_run_changed(session, run_id)  # live views show the wait and the placement
    return ok


def mark_succeeded(session: Session, run_id: int, worker: str | None = None) -> bool:
    """running -> succeeded (progress 1), only while ``worker`` (when given) owns it."""
    own = [Run.worker == worker] if worker is not None else []
    return _move(session, run_id, "succeeded", ["running"], *own, progress=1.0)


def mark_cancelled(session: Session, run_id: int, worker: str | None = None) -> bool:
    """running -> cancelled (the worker stopped on a cancel request), only while ``worker`` owns it."""
    own = [Run.worker == worker] if worker is not None else []
    return _move(session, run_id, "cancelled", ["running"], *own, cancel_requested=True)


def mark_failed(session: Session, run_id: int, error: str, worker: str | None = None) -> bool:
    """Fail a queued or running run with its error text (the last 20,000 characters); with
    ``worker``, only a running run that process still owns."""
    if worker is not None:
        return _move(session, run_id, "failed", ["running"], Run.worker == worker, error=error[-ERROR_CHARS:])
    return _move(session, run_id, "failed", ["queued", "running"], error=error[-ERROR_CHARS:])


def requeue_retry(session: Session, run_id: int, worker: str, why: str) -> bool:
    """running -> queued for a run whose attempt failed for a reason a retry can outlive (a node of
    its cluster lost), by the live worker that owns it: a new ticket resumes it from its last
    checkpoint, and its placement waits until the cluster has the nodes again. ``error`` says why
    ("re-queued: ...") until the next attempt is claimed. A cancel requested meanwhile wins."""
    return _move(session, run_id, "queued", ["running"], Run.worker == worker, Run.cancel_requested.is_(False),
                 error=f"re-queued: {why}"[-ERROR_CHARS:])


# ---------------------------------------------------------------- orphans (worker vanished)


def orphan_fate(cancel_requested: bool, attempts: int, max_attempts: int) -> OrphanFate:
    """The one rule for a running run whose worker vanished: cancelled if a cancel was requested,
    failed once it used ``max_attempts`` attempts, else retried (the reaper re-queues it, a
    redelivered task takes it over) from its last checkpoint."""
    if cancel_requested:
        return "cancelled"
    if attempts >= max_attempts:
        return "failed"
    return "retry"


def release_orphan(session: Session, run: Run, why: str, max_attempts: int,
                   stale_before: datetime | None = None) -> str | None:
    """running -> queued | failed | cancelled (:func:`orphan_fate`) for ``run``, read earlier.

    Compare-and-set on what the fate was decided from (owner, cancel flag, attempts and, with
    ``stale_before``, a heartbeat still older than it): a worker that beat, a cancel that arrived
    or a takeover in the meantime wins, and None is returned. ``why`` names the lost worker.
    """
    fate = orphan_fate(run.cancel_requested, run.attempts, max_attempts)
    dst = "queued" if fate == "retry" else fate
    fields = {"queued": {"error": f"re-queued: {why}"}, "cancelled": {},
              "failed": {"error": f"worker lost: {why}; the run used all {run.attempts} attempt(s) "
                                  f"(AERO_MAX_ATTEMPTS={max_attempts})"}}[dst]
    where = [_owned_by(run.worker), Run.cancel_requested.is_(bool(run.cancel_requested)), Run.attempts == run.attempts]
    if stale_before is not None:
        where.append(_last_seen() < stale_before)
    return dst if _move(session, run.id, dst, ["running"], *where, **fields) else None


def _last_seen() -> ColumnElement:
    return func.coalesce(Run.heartbeat_at, Run.started_at, Run.created_at)


def stale_runs(session: Session, older_than_s: float) -> list[Run]:
    """Running runs whose heartbeat (or start) is older than ``older_than_s`` seconds."""
    cutoff = utcnow() - timedelta(seconds=older_than_s)
    return list(session.scalars(select(Run).where(Run.status == "running", _last_seen() < cutoff).order_by(Run.id)))


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
    owner: str | None = None,
    gpus: int = 0,
    priority: int = 0,
) -> Run:
    """Insert a queued run of ``owner`` that will hold ``gpus`` GPUs, claimed by ``priority`` first
    (backend/db/fair_share.py). ``config`` is a validated RunConfig as JSON (``model_dump(mode='json')``)."""
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
        owner=owner,
        gpus=gpus,
        priority=priority,
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


def is_waiting() -> ColumnElement[bool]:
    """A running run that waits for its GPUs (``waiting_for`` set): listed as :data:`WAITING`."""
    return (Run.status == "running") & Run.waiting_for.is_not(None)


def _status_clause(status: str | Sequence[str]) -> ColumnElement[bool]:
    """Runs with any of the stored statuses named, or waiting (:data:`WAITING`); ``running``
    matches the waiting runs too (they are running: claimed by a worker)."""
    wanted = [status] if isinstance(status, str) else list(status)
    stored = [s for s in wanted if s != WAITING]
    if WAITING not in wanted:
        return Run.status.in_(stored)
    return is_waiting() | Run.status.in_(stored) if stored else is_waiting()


def _filtered(session: Session, stmt: Select, status, method, tag, sweep_id, owner=None) -> Select:
    if status:
        stmt = stmt.where(_status_clause(status))
    if method:
        stmt = stmt.where(Run.method.in_([method] if isinstance(method, str) else list(method)))
    if tag:
        stmt = stmt.where(_has_tag(session, tag))
    if sweep_id is not None:
        stmt = stmt.where(Run.sweep_id == sweep_id)
    if owner is not None:
        stmt = stmt.where(Run.owner == owner)
    return stmt


def list_runs(
    session: Session,
    *,
    status: str | Sequence[str] | None = None,
    method: str | Sequence[str] | None = None,
    tag: str | None = None,
    sweep_id: int | None = None,
    owner: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> tuple[list[Run], int]:
    """Runs matching every given filter, newest first, and the total count before paging.
    ``status`` may name :data:`WAITING` (running runs that wait for their GPUs) besides the
    stored statuses; ``running`` matches those too."""
    total = session.scalar(_filtered(session, select(func.count(Run.id)), status, method, tag, sweep_id, owner)) or 0
    stmt = _filtered(session, select(Run), status, method, tag, sweep_id, owner).order_by(Run.id.desc()).limit(limit).offset(offset)
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


def resume_run(session: Session, run_id: int) -> Run:
    """failed | cancelled -> queued, with a fresh attempt count and no error, cancel flag or stop
    reason: its worker resumes it from the last checkpoint in its run directory (from the start
    when it has none). Raises :class:`RunConflict` for other statuses, :class:`RunNotFound`."""
    sources = ["failed", "cancelled"]
    if not _move(session, run_id, "queued", sources, cancel_requested=False, error=None, finished_at=None,
                 stop_reason=None, attempts=0):
        current = session.scalar(select(Run.status).where(Run.id == run_id))
        if current is None:
            raise RunNotFound(run_id)
        raise RunConflict(run_id, current, "resume it (only a failed or cancelled run resumes)")
    return get_run(session, run_id, refresh=True)


def request_cancel(session: Session, run_id: int) -> Run:
    """Cancel, in one UPDATE: a queued run is cancelled at once; a running one gets
    ``cancel_requested`` and its worker stops within one step. Raises :class:`RunConflict` for
    finished runs, :class:`RunNotFound`."""
    queued = Run.status == "queued"
    stmt = update(Run).where(Run.id == run_id, Run.status.in_(sources_of("cancelled"))).values(
        cancel_requested=True, status=case((queued, "cancelled"), else_=Run.status),
        finished_at=case((queued, utcnow()), else_=Run.finished_at))
    if session.execute(stmt).rowcount == 0:
        current = session.scalar(select(Run.status).where(Run.id == run_id))
        if current is None:
            raise RunNotFound(run_id)
        raise RunConflict(run_id, current, "cancel a finished run")
    notify_run_changed(session, run_id)
    return get_run(session, run_id, refresh=True)


def delete_run(session: Session, run_id: int) -> None:
    """Delete a finished run with its metrics, evals and checkpoint rows (files stay on disk).
    Raises :class:`RunConflict` for queued or running runs."""
    status = session.scalar(select(Run.status).where(Run.id == run_id))
    if status is None:
        raise RunNotFound(run_id)
    if status not in FINISHED_STATUSES:
        raise RunConflict(run_id, status, "delete a run that has not finished (cancel it first)")
    for model in (StepMetric, EvalResult, Checkpoint, AlertEvent):
        session.execute(delete(model).where(model.run_id == run_id))
    res = session.execute(delete(Run).where(Run.id == run_id, Run.status.in_(FINISHED_STATUSES)))
    if res.rowcount != 1:  # it changed under us
        raise RunConflict(run_id, status, "delete")


def runs_by_status(session: Session) -> dict[str, int]:
    """Count of runs per status (every status present, zeros included)."""
    counts = dict(session.execute(select(Run.status, func.count(Run.id)).group_by(Run.status)).all())
    return {s: int(counts.get(s, 0)) for s in RUN_STATUSES}


def runs_waiting(session: Session) -> int:
    """Running runs that wait for their GPUs (:func:`is_waiting`)."""
    return int(session.scalar(select(func.count(Run.id)).where(is_waiting())) or 0)


def gpus_held(session: Session) -> dict[str | None, int]:
    """GPUs held per owner: the stored ``gpus`` of running runs that wait for nothing (placed, or
    needing no placement), summed by owner; owners with no such run are left out."""
    rows = session.execute(select(Run.owner, func.sum(Run.gpus)).where(
        Run.status == "running", Run.waiting_for.is_(None)).group_by(Run.owner)).all()
    return {owner: int(n or 0) for owner, n in rows}


__all__ = [
    "TRANSITIONS", "RunNotFound", "RunConflict", "can_transition", "sources_of", "claim_run", "cancel_queued",
    "take_over", "record_progress", "record_placement", "mark_succeeded", "mark_cancelled", "mark_failed", "requeue_retry",
    "orphan_fate",
    "release_orphan", "stale_runs", "create_run", "get_run", "list_runs", "update_run", "WAITING", "is_waiting",
    "runs_waiting", "gpus_held",
    "request_cancel", "delete_run", "runs_by_status",
]
