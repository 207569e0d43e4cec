"""Reading a run's step metrics for plots: key selection, ``since_step``, downsampling, and
the polling behind the SSE stream."""

from __future__ import annotations

import hashlib

import orjson

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from backend.db.metrics import read_step_metrics
from backend.db.models import Run, StepMetric
from backend.db.runs import RunNotFound
from backend.db.session import autocommit_reads
from backend.services.cache import ByteLRU
from backend.services.downsample import downsample_indices


MAX_METRIC_KEYS = 200  # one bound parameter each in the read's key list; bounds the answer too


class TooManyKeys(ValueError):
    pass


def parse_keys(raw: Iterable[str] | None, limit: int = MAX_METRIC_KEYS) -> list[str] | None:
    """``keys=a,b&keys=c`` -> ["a", "b", "c"] (order kept, duplicates and blanks dropped); None = all.
    More than ``limit`` distinct keys raise :class:`TooManyKeys`."""
    if not raw:
        return None
    keys = list(dict.fromkeys(k.strip() for part in raw for k in part.split(",") if k.strip()))
    if len(keys) > limit:
        raise TooManyKeys(f"at most {limit} metric keys per request; got {len(keys)}")
    return keys or None


def _run_status(session: Session, run_id: int) -> str:
    status = session.scalar(select(Run.status).where(Run.id == run_id))
    if status is None:
        raise RunNotFound(run_id)
    return status


def dumps(obj: Any) -> bytes:
    """Compact JSON (orjson: ~20x the stdlib on thousands of floats; NaN would become null)."""
    return orjson.dumps(obj)


# Built once: constructing and hashing the statement per request cost more than running it.
_VERSION = select(Run.status, Run.metrics_version).where(Run.id == bindparam("run_id"))


def metrics_body(
    session: Session, run_id: int, keys: Sequence[str] | None, since_step: int | None, every: int,
    max_points: int | None, cache: ByteLRU | None = None,
) -> tuple[str, bytes]:
    """(ETag, JSON body) of GET /runs/{id}/metrics, the body from ``cache`` when the run has
    not changed.

    One primary-key read of (status, metrics_version) decides; the steps are read after it,
    so a cached body is never older than the version it is filed under. The ETag names that
    version and the query, so a client that sends it back gets 304 until a step lands.
    """
    autocommit_reads(session)  # two reads, the version first: no snapshot needed
    row = session.connection().execute(_VERSION, {"run_id": run_id}).first()
    if row is None:
        raise RunNotFound(run_id)
    key = (run_id, row.metrics_version, row.status, tuple(keys) if keys else None, since_step, every, max_points)
    etag = f'W/"{run_id}-{row.metrics_version}-{row.status}-{hashlib.sha1(repr(key[3:]).encode()).hexdigest()[:16]}"'

    def build() -> bytes:
        return dumps(metrics_payload(session, run_id, keys, since_step, every, max_points, status=row.status))

    return etag, (build() if cache is None else cache.get_or_build(key, build))


def metrics_payload(
    session: Session, run_id: int, keys: Sequence[str] | None, since_step: int | None, every: int, max_points: int | None,
    status: str | None = None,
) -> dict[str, Any]:
    """The GET /runs/{id}/metrics body (schemas.MetricsPublic) as a plain dict, for
    :func:`dumps` (a whole run's all-key series come as pre-serialised ``orjson.Fragment``)."""
    status = status or _run_status(session, run_id)
    cols = read_step_metrics(session, run_id, keys, since_step, pick=lambda n: downsample_indices(n, every, max_points),
                             fragments=True)
    last_step = None
    if cols.stored:
        last_step = cols.steps[-1]  # downsampling always keeps the last point
    elif since_step is not None:
        last_step = session.scalar(select(StepMetric.step).where(StepMetric.run_id == run_id).order_by(StepMetric.step.desc()).limit(1))
    return {
        "run_id": run_id,
        "steps": cols.steps,
        "series": cols.series,
        "stored_steps": cols.stored,
        "last_step": last_step,
        "run_status": status,
    }


def poll_new_steps(session: Session, run_id: int, after_step: int | None,
                   keys: Sequence[str] | None) -> tuple[str, dict[str, Any], list[tuple[int, dict[str, Any]]]]:
    """One SSE poll: (status, progress fields, [(step, metrics)] stored after ``after_step``).

    The run is read before its steps: a worker stores a step before it finishes the run, so a
    finished status seen here means every step is already visible to the next query.
    """
    run = session.execute(select(Run.status, Run.progress, Run.current_step, Run.error).where(Run.id == run_id)).first()
    if run is None:
        raise RunNotFound(run_id)
    stmt = select(StepMetric.step, StepMetric.metrics).where(StepMetric.run_id == run_id)
    if after_step is not None:
        stmt = stmt.where(StepMetric.step > after_step)
    rows = session.execute(stmt.order_by(StepMetric.step)).all()
    if keys is not None:
        rows = [(s, {k: m.get(k) for k in keys}) for s, m in rows]
    info = {"status": run.status, "progress": run.progress, "current_step": run.current_step, "error": run.error}
    return run.status, info, [(s, m) for s, m in rows]
