"""Columnar chunks of a run's step metrics: the copy that plots read.

``step_metrics`` keeps one JSON dict per (run, step): cheap to append, and what the live
stream polls for new steps. But a curve of a few keys over a long run had to open every
step's dict (PostgreSQL decompresses a step's TOASTed JSONB once per key per step), which
made an uncached 5-key read of a 2,000-step run cost ~13 ms of server time. So every write
also keeps a columnar copy, in the same transaction: a run's steps are cut into chunks of
``CHUNK_STEPS`` consecutive step numbers; ``metric_chunks`` holds each chunk's step numbers
and ``metric_series`` each key's values over a chunk, both as JSON arrays (orjson parses a
128-value array in microseconds). A plot of k keys over n steps reads k * n / CHUNK_STEPS
short rows, found by primary key (run, key, chunk).

Alignment: ``values[i]`` is the key's value at the chunk's ``steps[i]``; a shorter array means
None for the remaining steps, so a key absent from the newest steps costs no rewrite, and
trailing Nones are never stored. A key has a row in a chunk iff some step of the chunk logged
it (its value may be null), which is what "every key seen" means to the readers.

Writes: steps appended after a chunk's last step extend the arrays of the keys they carry;
anything else (a re-logged step, a step out of order, a truncation on resume) rebuilds the
chunk from ``step_metrics``, the source of truth. ``CHUNK_STEPS`` is part of the stored
format: migration 0004 built the chunks with the same value.
"""

from __future__ import annotations

import bisect
import json
from functools import lru_cache
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson
from sqlalchemy import Text, bindparam, cast, delete, null, select, union_all
from sqlalchemy.orm import Session

from backend.db.models import MetricChunk, MetricSeries, StepMetric
from backend.db.upsert import upsert

CHUNK_STEPS = 128  # chosen by measurement (BENCHMARKS.md, "Metric reads, uncached")

Columns = dict[str, list[Any]]
decode = orjson.loads


def chunk_of(step: int) -> int:
    return step // CHUNK_STEPS


def encode(values: list[Any]) -> str:
    """A JSON array (orjson; the stdlib for an int beyond 64 bits, which orjson refuses)."""
    try:
        return orjson.dumps(values).decode()
    except TypeError:
        return json.dumps(values)


def _rstrip(values: list[Any]) -> list[Any]:
    while values and values[-1] is None:
        values.pop()
    return values


def build_chunk(rows: Iterable[tuple[int, dict[str, Any]]]) -> tuple[list[int], Columns]:
    """(steps, {key: values}) of one chunk from its (step, metrics) rows in step order."""
    rows = list(rows)
    keys = dict.fromkeys(k for _, m in rows for k in m)
    return [s for s, _ in rows], {k: _rstrip([m.get(k) for _, m in rows]) for k in keys}


def append_rows(steps: list[int], cols: Columns, new: Sequence[tuple[int, dict[str, Any]]]) -> tuple[list[int], Columns]:
    """Append ``new`` (step order, every step after ``steps[-1]``) to a chunk. ``cols`` needs
    only the keys that ``new`` carries; returns the chunk's steps and those keys' new arrays."""
    n = len(steps)
    out: Columns = {}
    for k in dict.fromkeys(k for _, m in new for k in m):
        col = cols.get(k, [])
        out[k] = _rstrip(col + [None] * (n - len(col)) + [m.get(k) for _, m in new])
    return steps + [s for s, _ in new], out


def _starts(chunks: Sequence[tuple[int, str]]) -> tuple[list[int], dict[int, tuple[int, int]]]:
    """The concatenated steps of ``chunks`` (chunk order) and each chunk's (offset, size)."""
    start: dict[int, tuple[int, int]] = {}
    steps: list[int] = []
    for c, text in chunks:
        part = decode(text)
        start[c] = (len(steps), len(part))
        steps += part
    return steps, start


def assemble(steps: list[int], start: dict[int, tuple[int, int]], rows: Iterable[tuple[str, int, str]],
             keys: Sequence[str] | None) -> Columns:
    """{key: values} aligned with ``steps``; ``keys`` None = every key that has a row, sorted;
    a requested key without rows is all None."""
    n = len(steps)
    series: Columns = {k: [None] * n for k in keys} if keys is not None else {}
    for k, c, data in rows:
        if c not in start:
            continue
        col = series.get(k)
        if col is None:
            if keys is not None:
                continue  # not asked for
            col = series[k] = [None] * n
        i, size = start[c]
        vals = decode(data)[:size]
        col[i : i + len(vals)] = vals
    return series if keys is not None else {k: series[k] for k in sorted(series)}


def splice(chunks: Sequence[int], start: dict[int, tuple[int, int]],
           rows: Iterable[tuple[str, int, str]]) -> dict[str, orjson.Fragment]:
    """Every key's whole series as pre-serialised JSON, sorted by key: the stored arrays joined
    as text, padded with nulls, never parsed. The same JSON that parsing and re-serialising
    with orjson gives (the arrays were written by orjson), at a fraction of the cost; valid
    only because the values are numbers and nulls (no commas inside a value)."""
    by_key: dict[str, dict[int, str]] = {}
    for k, c, data in rows:
        by_key.setdefault(k, {})[c] = data
    out = {}
    for k in sorted(by_key):
        parts, mine = [], by_key[k]
        for c in chunks:
            size = start[c][1]
            inner = mine.get(c, "[]")[1:-1]
            have = inner.count(",") + 1 if inner else 0
            parts.append(",".join(filter(None, (inner, ",".join(["null"] * (size - have))))))
        out[k] = orjson.Fragment("[" + ",".join(parts) + "]")
    return out


# ------------------------------------------------------------------ the store


def read_columns(session: Session, run_id: int, keys: Sequence[str] | None, since_step: int | None = None,
                 pick: Callable[[int], list[int]] | None = None,
                 fragments: bool = False) -> tuple[list[int], dict[str, Any], int]:
    """(steps, {key: values}, n) of one run in step order, after ``since_step`` (exclusive):
    one statement, two index range scans (the chunks' steps, the wanted keys' arrays).
    ``n`` is the number of steps found; ``pick(n)``, when given, the positions kept.
    Values are as logged (ints stay ints). With ``since_step``, ``keys`` None lists the keys of
    the chunks read, which may include keys logged only at or before ``since_step``.
    ``fragments``: for every key of a whole run, kept whole, give each series as an
    ``orjson.Fragment`` (see :func:`splice`) instead of a list."""
    chunks, rows = _fetch(session, run_id, keys, None if since_step is None else chunk_of(since_step + 1))
    if not chunks:
        return [], {k: [] for k in keys or ()}, 0
    steps, start = _starts(chunks)
    skip = 0 if since_step is None else bisect.bisect_right(steps, since_step)
    n = len(steps) - skip
    idx = None if pick is None else pick(n)
    whole = idx is None or len(idx) == n
    if fragments and whole and not skip and keys is None:
        return steps, splice([c for c, _ in chunks], start, rows), n
    series = assemble(steps, start, rows, keys)
    if skip:
        steps, series = steps[skip:], {k: v[skip:] for k, v in series.items()}
    if not whole:
        steps, series = [steps[i] for i in idx], {k: [v[i] for i in idx] for k, v in series.items()}
    return steps, series, n


@lru_cache(maxsize=None)
def _fetch_stmt(some_keys: bool, from_chunk: bool):
    """The UNION ALL of :func:`_fetch`, built once per shape with bound parameters: building and
    hashing a statement per read cost a third of the read's CPU."""
    run = bindparam("run_id")
    cq = select(cast(null(), Text).label("key"), MetricChunk.chunk, MetricChunk.steps).where(MetricChunk.run_id == run)
    sq = select(MetricSeries.key, MetricSeries.chunk, MetricSeries.data).where(MetricSeries.run_id == run)
    if from_chunk:
        cq, sq = cq.where(MetricChunk.chunk >= bindparam("first")), sq.where(MetricSeries.chunk >= bindparam("first"))
    if some_keys:
        sq = sq.where(MetricSeries.key.in_(bindparam("keys", expanding=True)))
    return union_all(cq, sq)


def _fetch(session: Session, run_id: int, keys: Sequence[str] | None, first: int | None):
    """([(chunk, steps)] in chunk order, [(key, chunk, values)]) of a run from chunk ``first``
    on: both in one UNION ALL (a chunk row has key NULL), one round trip instead of two."""
    params: dict[str, Any] = {"run_id": run_id}
    if first is not None:
        params["first"] = first
    if keys is not None:
        params["keys"] = list(keys)
    stmt = _fetch_stmt(keys is not None, first is not None)
    rows = session.connection().execute(stmt, params).all()  # Core rows: no ORM result machinery
    chunks = sorted((c, text) for k, c, text in rows if k is None)
    return chunks, [r for r in rows if r[0] is not None]


def write_steps(session: Session, run_id: int, rows: dict[int, dict[str, Any]]) -> None:
    """Bring the chunks up to date after ``rows`` ({step: cleaned metrics}) were upserted into
    ``step_metrics`` in this transaction. The caller holds the run's row lock (see
    :func:`backend.db.metrics.upsert_step_metrics`), so read-modify-write is safe."""
    by_chunk: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for s in sorted(rows):
        by_chunk.setdefault(chunk_of(s), []).append((s, rows[s]))
    chunk_rows, series_rows = [], []
    for c, new in by_chunk.items():
        steps = session.scalar(select(MetricChunk.steps).where(MetricChunk.run_id == run_id, MetricChunk.chunk == c))
        steps = decode(steps) if steps is not None else []
        if steps and new[0][0] <= steps[-1]:
            rebuild_chunk(session, run_id, c)
            continue
        cols = _chunk_cols(session, run_id, c, {k for _, m in new for k in m}) if steps else {}
        steps, cols = append_rows(steps, cols, new)
        chunk_rows.append({"run_id": run_id, "chunk": c, "steps": encode(steps)})
        series_rows += [{"run_id": run_id, "key": k, "chunk": c, "data": encode(v)} for k, v in cols.items()]
    if chunk_rows:
        upsert(session, MetricChunk, chunk_rows, ("run_id", "chunk"))
    if series_rows:
        upsert(session, MetricSeries, series_rows, ("run_id", "key", "chunk"))


def _chunk_cols(session: Session, run_id: int, chunk: int, keys: set[str]) -> Columns:
    q = select(MetricSeries.key, MetricSeries.data).where(MetricSeries.run_id == run_id, MetricSeries.chunk == chunk,
                                                         MetricSeries.key.in_(sorted(keys)))
    return {k: decode(d) for k, d in session.execute(q)}


def rebuild_chunk(session: Session, run_id: int, chunk: int) -> None:
    """Rewrite one chunk from the run's ``step_metrics`` rows (removing it if none is left)."""
    lo, hi = chunk * CHUNK_STEPS, (chunk + 1) * CHUNK_STEPS
    rows = session.execute(select(StepMetric.step, StepMetric.metrics)
                           .where(StepMetric.run_id == run_id, StepMetric.step >= lo, StepMetric.step < hi)
                           .order_by(StepMetric.step)).all()
    session.execute(delete(MetricSeries).where(MetricSeries.run_id == run_id, MetricSeries.chunk == chunk))
    session.execute(delete(MetricChunk).where(MetricChunk.run_id == run_id, MetricChunk.chunk == chunk))
    if not rows:
        return
    steps, cols = build_chunk(rows)
    upsert(session, MetricChunk, [{"run_id": run_id, "chunk": chunk, "steps": encode(steps)}], ("run_id", "chunk"))
    if cols:
        series_rows = [{"run_id": run_id, "key": k, "chunk": chunk, "data": encode(v)} for k, v in cols.items()]
        upsert(session, MetricSeries, series_rows, ("run_id", "key", "chunk"))


def truncate_after(session: Session, run_id: int, step: int) -> None:
    """After the run's ``step_metrics`` past ``step`` were deleted: drop the later chunks and
    rebuild the one that holds ``step``."""
    c = chunk_of(step)
    session.execute(delete(MetricSeries).where(MetricSeries.run_id == run_id, MetricSeries.chunk > c))
    session.execute(delete(MetricChunk).where(MetricChunk.run_id == run_id, MetricChunk.chunk > c))
    rebuild_chunk(session, run_id, c)


def keys_of(session: Session, run_id: int) -> list[str]:
    """Every metric key a run logged, sorted: the distinct keys of its columnar copy (a key has a
    row in a chunk iff a step of the chunk logged it), found on the primary key's (run, key) prefix."""
    return list(session.scalars(select(MetricSeries.key).where(MetricSeries.run_id == run_id).distinct().order_by(MetricSeries.key)))
