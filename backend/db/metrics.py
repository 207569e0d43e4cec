"""Step metrics, eval results and checkpoint rows: idempotent batched upserts and reads.

A resumed run re-logs the steps after its last checkpoint, so every write here is an
``INSERT ... ON CONFLICT (key) DO UPDATE`` (PostgreSQL and SQLite dialect inserts): writing the
same (run, step) twice leaves one row holding the latest values. Non-finite floats become
JSON null (PostgreSQL's JSONB rejects NaN).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from backend.db.models import Checkpoint, EvalResult, Run, StepMetric, utcnow

BATCH_ROWS = 500  # rows per INSERT statement (SQLite's bound-parameter limit leaves room)


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


def _insert(session: Session):
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:  # pragma: no cover - only the two supported stores
        raise NotImplementedError(f"upsert on {dialect}")
    return insert


def _upsert(session: Session, model, rows: list[dict[str, Any]], keys: Sequence[str], batch: int = BATCH_ROWS) -> int:
    """INSERT rows, updating every non-key column on conflict with ``keys``. Returns row count."""
    insert = _insert(session)
    for i in range(0, len(rows), batch):
        stmt = insert(model).values(rows[i : i + batch])
        update_cols = {c: stmt.excluded[c] for c in rows[0] if c not in keys}
        session.execute(stmt.on_conflict_do_update(index_elements=list(keys), set_=update_cols))
    return len(rows)


def upsert_step_metrics(
    session: Session, run_id: int, steps: Mapping[int, Mapping[str, Any]] | Iterable[tuple[int, Mapping[str, Any]]]
) -> int:
    """Store many steps' metrics for one run in batched upserts, idempotent on (run_id, step).

    ``steps``: {step: {key: value}} or [(step, {key: value})]. A step given twice keeps its
    last metrics. Also bumps ``runs.metrics_version`` (the API's cache key), in the same
    transaction. Returns the number of distinct steps written. The caller commits.
    """
    items = steps.items() if isinstance(steps, Mapping) else steps
    now = utcnow()
    latest = {int(step): clean_metrics(m) for step, m in items}  # dedupe: ON CONFLICT cannot hit a row twice
    rows = [{"run_id": run_id, "step": s, "metrics": m, "logged_at": now} for s, m in sorted(latest.items())]
    if not rows:
        return 0
    _upsert(session, StepMetric, rows, ("run_id", "step"))
    bump_metrics_version(session, run_id)
    return len(rows)


def bump_metrics_version(session: Session, run_id: int) -> None:
    """Invalidate cached metric answers of a run (call after changing its step rows directly)."""
    session.execute(update(Run).where(Run.id == run_id).values(metrics_version=Run.metrics_version + 1))


def delete_steps_after(session: Session, run_id: int, step: int) -> int:
    """On resume from the checkpoint of ``step``: delete the run's stored steps and evals after
    it, and bump ``metrics_version`` so no cached answer still shows them. Returns the number
    of step rows deleted. The caller commits."""
    n = session.execute(delete(StepMetric).where(StepMetric.run_id == run_id, StepMetric.step > step)).rowcount
    session.execute(delete(EvalResult).where(EvalResult.run_id == run_id, EvalResult.step > step))
    bump_metrics_version(session, run_id)
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
    """Columnar step metrics: ``series[key][i]`` is the value of ``key`` at ``steps[i]`` (None if absent)."""

    steps: list[int] = field(default_factory=list)
    series: dict[str, list[float | int | None]] = field(default_factory=dict)


def read_step_metrics(
    session: Session, run_id: int, keys: Sequence[str] | None = None, since_step: int | None = None
) -> MetricColumns:
    """Steps of one run in step order, after ``since_step`` (exclusive) when given.

    ``keys`` selects metrics (unknown keys give all-None columns); None = every key seen.
    With keys, the database extracts them (``metrics ->> key`` / ``json_extract``) so the
    whole JSON row is never shipped and parsed; the values come back as floats.
    One index range scan on the (run_id, step) primary key either way.
    """
    where = [StepMetric.run_id == run_id]
    if since_step is not None:
        where.append(StepMetric.step > since_step)
    if keys is not None:
        keys = list(dict.fromkeys(keys))
        cols = [StepMetric.metrics[k].as_float() for k in keys]
        rows = session.execute(select(StepMetric.step, *cols).where(*where).order_by(StepMetric.step)).all()
        return MetricColumns(steps=[r[0] for r in rows], series={k: [r[i + 1] for r in rows] for i, k in enumerate(keys)})
    rows = session.execute(select(StepMetric.step, StepMetric.metrics).where(*where).order_by(StepMetric.step)).all()
    seen: dict[str, None] = {}
    for _, m in rows:
        seen.update(dict.fromkeys(m))
    return MetricColumns(steps=[r[0] for r in rows], series={k: [r[1].get(k) for r in rows] for k in sorted(seen)})


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
