"""Step metrics, eval results and checkpoint rows: idempotent batched upserts and reads.

A resumed run re-logs the steps after its last checkpoint, so every write here is an
``INSERT ... ON CONFLICT (key) DO UPDATE`` (PostgreSQL and SQLite dialect inserts): writing the
same (run, step) twice leaves one row holding the latest values. Non-finite floats become
JSON null (PostgreSQL's JSONB rejects NaN).

Step metrics live twice, written in one transaction: ``step_metrics`` (one JSON dict per step:
the log, polled by the live stream) and its columnar copy in :mod:`backend.db.series` (what
whole-series reads use: a few keys over thousands of steps read a few short rows).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from backend.db import rollouts, series
from backend.db.models import Checkpoint, EvalResult, Run, StepMetric, utcnow
from backend.db.notify import notify_run_changed
from backend.db.upsert import BATCH_ROWS as BATCH_ROWS  # re-exported: tests size their batches with it
from backend.db.upsert import upsert as _upsert


def clean_value(v: Any) -> float | int | None:
    """A JSON-safe number: ints stay ints, other numbers (numpy/torch scalars too) become
    floats, non-finite values and None become None. Raises TypeError for non-numbers."""
    if v is None:
        return None
    if hasattr(v, "item") and not isinstance(v, (int, float)):
        v = v.item()
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    f = float(v)
    return f if math.isfinite(f) else None


def clean_metrics(metrics: Mapping[str, Any]) -> dict[str, float | int | None]:
    return {str(k): clean_value(v) for k, v in metrics.items()}


def upsert_step_metrics(
    session: Session, run_id: int, steps: Mapping[int, Mapping[str, Any]] | Iterable[tuple[int, Mapping[str, Any]]]
) -> int:
    """Store many steps' metrics for one run in batched upserts, idempotent on (run_id, step).

    ``steps``: {step: {key: value}} or [(step, {key: value})]. A step given twice keeps its
    last metrics. Also bumps ``runs.metrics_version`` (the API's cache key) and updates the
    columnar copy, in the same transaction. Returns the number of distinct steps written.
    The caller commits.

    The version bump comes first: its row lock on the run (PostgreSQL; SQLite has one writer)
    serialises writers of one run, so the read-modify-write of the columnar chunks never
    loses a concurrent append.
    """
    items = steps.items() if isinstance(steps, Mapping) else steps
    now = utcnow()
    latest = {int(step): clean_metrics(m) for step, m in items}  # dedupe: ON CONFLICT cannot hit a row twice
    rows = [{"run_id": run_id, "step": s, "metrics": m, "logged_at": now} for s, m in sorted(latest.items())]
    if not rows:
        return 0
    bump_metrics_version(session, run_id)
    _upsert(session, StepMetric, rows, ("run_id", "step"))
    series.write_steps(session, run_id, latest)
    return len(rows)


def bump_metrics_version(session: Session, run_id: int) -> None:
    """Invalidate cached metric answers of a run (call after changing its step rows directly)."""
    session.execute(update(Run).where(Run.id == run_id).values(metrics_version=Run.metrics_version + 1))
    notify_run_changed(session, run_id)  # every step write and truncation passes here


def delete_steps_after(session: Session, run_id: int, step: int) -> int:
    """On resume from the checkpoint of ``step``: delete the run's stored steps, evals and
    checkpoint records after it, and bump ``metrics_version`` so no cached answer still shows them. Returns the number
    of step rows deleted. The caller commits."""
    bump_metrics_version(session, run_id)  # first: the run's row lock, as in upsert_step_metrics
    n = session.execute(delete(StepMetric).where(StepMetric.run_id == run_id, StepMetric.step > step)).rowcount
    series.truncate_after(session, run_id, step)
    rollouts.delete_after(session, run_id, step)
    session.execute(delete(EvalResult).where(EvalResult.run_id == run_id, EvalResult.step > step))
    # checkpoints past it are being re-made (a resume from an older one: the newer did not load)
    session.execute(delete(Checkpoint).where(Checkpoint.run_id == run_id, Checkpoint.step > step))
    return n


def upsert_eval_results(session: Session, run_id: int, step: int, results: Mapping[str, Mapping[str, Any]]) -> int:
    """Store ``MetricSink.log_eval`` results, idempotent on (run_id, step, benchmark), and bump
    the run's ``metrics_version``.

    ``results``: {benchmark: {"n", "k", "avg_at_k", "pass_at_k", "avg_ci": [lo, hi],
    "pass_ci": [lo, hi], "per_problem": [[n, c], ...]}} (the pseudo-benchmark "overall" too).
    """
    now = utcnow()
    rows = []
    for bench, r in results.items():
        avg_ci = list(r.get("avg_ci") or (None, None))
        pass_ci = list(r.get("pass_ci") or (None, None))
        rows.append(
            {
                "run_id": run_id,
                "step": int(step),
                "benchmark": str(bench),
                "n": None if r.get("n") is None else int(r["n"]),
                "k": int(r.get("k", 1)),
                "avg_at_k": clean_value(r.get("avg_at_k")),
                "pass_at_k": clean_value(r.get("pass_at_k")),
                "avg_ci_lo": clean_value(avg_ci[0]),
                "avg_ci_hi": clean_value(avg_ci[1]),
                "pass_ci_lo": clean_value(pass_ci[0]),
                "pass_ci_hi": clean_value(pass_ci[1]),
                "per_problem": [[int(n), int(c)] for n, c in r.get("per_problem") or []],
                "logged_at": now,
            }
        )
    if not rows:
        return 0
    n = _upsert(session, EvalResult, rows, ("run_id", "step", "benchmark"))
    bump_metrics_version(session, run_id)  # cached comparisons include the evals
    return n


def record_checkpoint(session: Session, run_id: int, step: int, path: str) -> None:
    """Note a checkpoint written at ``step`` (idempotent on (run_id, step))."""
    _upsert(session, Checkpoint, [{"run_id": run_id, "step": int(step), "path": str(path), "created_at": utcnow()}], ("run_id", "step"))


def latest_checkpoint(session: Session, run_id: int) -> Checkpoint | None:
    return session.scalars(select(Checkpoint).where(Checkpoint.run_id == run_id).order_by(Checkpoint.step.desc()).limit(1)).first()


def list_checkpoints(session: Session, run_id: int) -> list[Checkpoint]:
    return list(session.scalars(select(Checkpoint).where(Checkpoint.run_id == run_id).order_by(Checkpoint.step)))


@dataclass
class MetricColumns:
    """Columnar step metrics: ``series[key][i]`` is the value of ``key`` at ``steps[i]`` (None if absent).
    ``stored``: how many steps the read found before any ``pick`` (= len(steps) without one)."""

    steps: list[int] = field(default_factory=list)
    series: dict[str, list[float | int | None]] = field(default_factory=dict)
    stored: int | None = None

    def __post_init__(self):
        if self.stored is None:
            self.stored = len(self.steps)


def read_step_metrics(
    session: Session, run_id: int, keys: Sequence[str] | None = None, since_step: int | None = None,
    pick: Callable[[int], list[int]] | None = None, fragments: bool = False,
) -> MetricColumns:
    """Steps of one run in step order, after ``since_step`` (exclusive) when given.

    ``keys`` selects metrics (unknown keys give all-None columns); None = every key seen (in
    the steps returned), values as logged. With keys the values come back as floats.
    ``pick(n)``: the positions to keep of the n steps found (downsampling), applied before the
    float conversion so that it costs per point returned, not per point stored.
    ``fragments``: a caller that only serialises the answer may get whole all-key series as
    pre-serialised ``orjson.Fragment`` values (:func:`backend.db.series.splice`).
    Reads the columnar copy (:mod:`backend.db.series`), except for all keys after
    ``since_step``, a tail that the per-step log answers exactly.
    """
    if keys is not None:
        keys = list(dict.fromkeys(keys))
        steps, cols, n = series.read_columns(session, run_id, keys, since_step, pick)
        return MetricColumns(steps=steps, series={k: floats(v) for k, v in cols.items()}, stored=n)
    if since_step is None:
        steps, cols, n = series.read_columns(session, run_id, None, None, pick, fragments)
        return MetricColumns(steps=steps, series=cols, stored=n)
    where = [StepMetric.run_id == run_id, StepMetric.step > since_step]
    rows = session.execute(select(StepMetric.step, StepMetric.metrics).where(*where).order_by(StepMetric.step)).all()
    seen: dict[str, None] = {}
    for _, m in rows:
        seen.update(dict.fromkeys(m))
    steps, cols = [r[0] for r in rows], {k: [r[1].get(k) for r in rows] for k in sorted(seen)}
    idx = None if pick is None else pick(len(steps))
    if idx is None or len(idx) == len(steps):
        return MetricColumns(steps=steps, series=cols)
    return MetricColumns(steps=[steps[i] for i in idx], series={k: [v[i] for i in idx] for k, v in cols.items()},
                         stored=len(steps))


def floats(values: list[Any]) -> list[float | None]:
    """Ints as floats (what key-selected reads return), None kept."""
    return [v if v is None or v.__class__ is float else float(v) for v in values]


def series_aggregates(session: Session, run_id: int, keys: Sequence[str]) -> dict[str, Any]:
    """{"steps": n, "mean": {key: mean}, "total": {key: sum}} over one run's stored steps, from
    the columnar copy: SQL's count(*), avg and sum over the values as floats (nulls skipped; a
    key with no value gives None), without opening every step's JSON once per key (that took
    ~200 ms for 2,000 steps and 40 keys on PostgreSQL)."""
    cols = read_step_metrics(session, run_id, keys)
    mean, total = {}, {}
    for k in dict.fromkeys(keys):
        vals = [v for v in cols.series[k] if v is not None]
        total[k] = sum(vals) if vals else None
        mean[k] = total[k] / len(vals) if vals else None
    return {"steps": cols.stored, "mean": mean, "total": total}


def step_count(session: Session, run_id: int) -> tuple[int, int | None]:
    """(number of stored steps, last step) for one run."""
    n, last = session.execute(select(func.count(), func.max(StepMetric.step)).where(StepMetric.run_id == run_id)).one()
    return int(n), last


def list_evals(session: Session, run_id: int, benchmark: str | None = None, step: int | None = None) -> list[EvalResult]:
    stmt = select(EvalResult).where(EvalResult.run_id == run_id)
    if benchmark is not None:
        stmt = stmt.where(EvalResult.benchmark == benchmark)
    if step is not None:
        stmt = stmt.where(EvalResult.step == step)
    return list(session.scalars(stmt.order_by(EvalResult.step, EvalResult.benchmark)))


def eval_values(session: Session, run_id: int, benchmark: str, metric: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one benchmark's ``metric`` ("avg_at_k" or "pass_at_k") over a run's
    evaluations, in step order; an evaluation without the value is skipped. Reads two columns,
    not the per-problem lists (a curve over many evaluations stays cheap)."""
    col = {"avg_at_k": EvalResult.avg_at_k, "pass_at_k": EvalResult.pass_at_k}[metric]
    rows = session.execute(select(EvalResult.step, col).where(EvalResult.run_id == run_id, EvalResult.benchmark == benchmark,
                                                              col.is_not(None)).order_by(EvalResult.step)).all()
    return [int(r[0]) for r in rows], [float(r[1]) for r in rows]


def latest_evals(session: Session, run_id: int) -> dict[str, EvalResult]:
    """The last evaluation of each benchmark for one run."""
    out: dict[str, EvalResult] = {}
    for ev in list_evals(session, run_id):
        out[ev.benchmark] = ev  # ordered by step: the last one wins
    return out
