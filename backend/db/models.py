"""SQLAlchemy 2 models of the store. The schema itself is created by Alembic migrations
(backend/alembic/versions); a test checks that autogenerate finds no difference.

Portable across SQLite and PostgreSQL: JSON columns become JSONB on PostgreSQL, and ids are
BIGINT on PostgreSQL but INTEGER on SQLite (where only ``INTEGER PRIMARY KEY`` autoincrements).
Timestamps are stored as naive UTC (``utcnow()``), the same on both dialects.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Named constraints keep migrations deterministic on both dialects.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

Id = BigInteger().with_variant(Integer(), "sqlite")
Json = JSON().with_variant(JSONB(), "postgresql")

RUN_STATUSES: tuple[str, ...] = ("queued", "running", "succeeded", "failed", "cancelled")
FINISHED_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


def utcnow() -> datetime:
    """Naive UTC now: what every timestamp column stores."""
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Sweep(Base):
    """A grid of runs (methods x seeds x overrides) submitted together."""

    __tablename__ = "sweeps"
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    spec: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    # The submitting user's name (User.name); None for sweeps stored before users existed.
    owner: Mapped[str | None] = mapped_column(String(200), index=True, default=None)


class Run(Base):
    """One training run. ``config`` is the validated RunConfig as JSON; ``status`` changes only
    through the guarded transitions in :mod:`backend.db.runs`."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    method: Mapped[str] = mapped_column(String(32), index=True)
    engine: Mapped[str] = mapped_column(String(32))
    config: Mapped[dict[str, Any]] = mapped_column(Json)
    status: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    queue: Mapped[str] = mapped_column(String(64), default="cpu")
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    current_step: Mapped[int] = mapped_column(Integer, default=0)
    total_steps: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    worker: Mapped[str | None] = mapped_column(String(200), default=None)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    tags: Mapped[list[str]] = mapped_column(Json, default=list)
    notes: Mapped[str] = mapped_column(Text, default="")
    sweep_id: Mapped[int | None] = mapped_column(Id, ForeignKey("sweeps.id", ondelete="SET NULL"), index=True, default=None)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # Bumped by every step-metrics write (backend.db.metrics.upsert_step_metrics): readers cache
    # a run's metric responses under (id, metrics_version, status).
    metrics_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The submitting user's name (User.name); None for runs stored before users existed (only an
    # admin may change those). Quotas and the workers' fair share count runs per owner.
    owner: Mapped[str | None] = mapped_column(String(200), index=True, default=None)
    # The run id named by the task message ("ticket") whose worker claimed this run: a message
    # claims the next run by the fair-share rule (worker/claim.py), so a redelivered message
    # finds the run it was serving through this column.
    ticket: Mapped[int | None] = mapped_column(Id, index=True, default=None)
    # Why a run ended before its last step other than a cancel: the alert rule that stopped it
    # (trainer/spec/alerts.py). None for a run that ran to its end, was cancelled or crashed.
    stop_reason: Mapped[str | None] = mapped_column(Text, default=None)
    # GPUs the run holds while it trains (resources.gpus_per_node x nodes, trainer/spec/resources.py):
    # set at submit, corrected by the worker once placed; AERO_QUOTA_RUNNING_GPUS counts them.
    gpus: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # What a claimed run waits for before its first step (its GPUs, trainer/platform/placement.py); None
    # once placed, and for a run that needs no placement.
    waiting_for: Mapped[str | None] = mapped_column(Text, default=None)
    # When it started waiting (the first ``waiting_for`` of this wait); None with ``waiting_for``.
    waiting_since: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    # Where it trains: the Ray cluster, nodes and GPU ids it was given (trainer/platform/placement.py).
    placement: Mapped[dict[str, Any] | None] = mapped_column(Json, default=None)
    # The submitter's priority, 0..10 (capped by their role: backend/services/priority.py): the
    # workers claim a queue's higher-priority runs first, before the fair share (backend/db/fair_share.py).
    priority: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class StepMetric(Base):
    """One training step's metrics (slash-namespaced keys, docs/metrics.md). The primary key
    (run_id, step) is the uniqueness that makes re-logging a resumed step idempotent. The log of
    record; whole-series reads use its columnar copy (:class:`MetricChunk`, :class:`MetricSeries`)."""

    __tablename__ = "step_metrics"
    run_id: Mapped[int] = mapped_column(Id, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    metrics: Mapped[dict[str, Any]] = mapped_column(Json)
    logged_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, index=True)


class MetricChunk(Base):
    """The steps of one chunk of a run (steps with ``step // CHUNK_STEPS == chunk``,
    :mod:`backend.db.series`) as a JSON array in ascending order: the positions the chunk's
    :class:`MetricSeries` rows are aligned with. A read-optimised copy of ``step_metrics``,
    kept in the same transaction as every write to it."""

    __tablename__ = "metric_chunks"
    run_id: Mapped[int] = mapped_column(Id, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    chunk: Mapped[int] = mapped_column(Integer, primary_key=True)
    steps: Mapped[str] = mapped_column(Text)


class MetricSeries(Base):
    """One metric key's values over one chunk: a JSON array aligned with the chunk's steps
    (a shorter array means None for the remaining steps). The key leads the primary key, so a
    plot's few keys are a few index range scans however many keys a step has."""

    __tablename__ = "metric_series"
    run_id: Mapped[int] = mapped_column(Id, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    chunk: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[str] = mapped_column(Text)


class StepDetail(Base):
    """A step's detail apart from its numbers (trainer/platform/step_detail.py): the bounded sample of its
    rollouts (text clipped, one JSON list) and its fixed-bin histograms (one small JSON dict), in two
    columns so that a heatmap over every step never reads the rollouts' text."""

    __tablename__ = "step_details"
    run_id: Mapped[int] = mapped_column(Id, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    histograms: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)  # first: small, read over every step
    rollouts: Mapped[list[dict[str, Any]]] = mapped_column(Json, default=list)
    logged_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class EvalResult(Base):
    """Per-benchmark evaluation at one step. ``per_problem`` holds [[n, c], ...] so any k can be
    recomputed; unique on (run, step, benchmark) so a re-logged eval replaces the old one."""

    __tablename__ = "eval_results"
    __table_args__ = (UniqueConstraint("run_id", "step", "benchmark", name="uq_eval_results_run_step_benchmark"),)
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(Id, ForeignKey("runs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)
    benchmark: Mapped[str] = mapped_column(String(200))
    n: Mapped[int | None] = mapped_column(Integer, default=None)
    k: Mapped[int] = mapped_column(Integer)
    avg_at_k: Mapped[float | None] = mapped_column(Float, default=None)
    pass_at_k: Mapped[float | None] = mapped_column(Float, default=None)
    avg_ci_lo: Mapped[float | None] = mapped_column(Float, default=None)
    avg_ci_hi: Mapped[float | None] = mapped_column(Float, default=None)
    pass_ci_lo: Mapped[float | None] = mapped_column(Float, default=None)
    pass_ci_hi: Mapped[float | None] = mapped_column(Float, default=None)
    per_problem: Mapped[list[list[int]]] = mapped_column(Json, default=list)
    logged_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Checkpoint(Base):
    """A checkpoint a worker wrote (model + optimizer + RNG + data position) at ``step``."""

    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("run_id", "step", name="uq_checkpoints_run_step"),)
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(Id, ForeignKey("runs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class AlertEvent(Base):
    """An alert rule of a run that fired (trainer/spec/alerts.py): at most one per (run, rule), so a
    resumed run never fires a rule twice. ``delivery`` says what became of its webhook post."""

    __tablename__ = "alert_events"
    __table_args__ = (UniqueConstraint("run_id", "rule", name="uq_alert_events_run_rule"),)
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(Id, ForeignKey("runs.id", ondelete="CASCADE"))
    rule: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))
    step: Mapped[int] = mapped_column(Integer)
    value: Mapped[float | None] = mapped_column(Float, default=None)
    message: Mapped[str] = mapped_column(Text)
    stopped: Mapped[bool] = mapped_column(Boolean, default=False)
    delivery: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


ROLES: tuple[str, ...] = ("admin", "member", "viewer")


class User(Base):
    """A person (or service) that holds tokens and owns runs; quotas count per user."""

    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class ApiToken(Base):
    """An API token. Only its SHA-256 hex digest is stored; the token is shown once at creation.
    It belongs to a user and carries a role (``ROLES``: admin, member, viewer)."""

    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    user_id: Mapped[int | None] = mapped_column(Id, ForeignKey("users.id", ondelete="CASCADE"), index=True, default=None)
    role: Mapped[str] = mapped_column(String(16), default="admin", server_default="admin")
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)



class AuditEvent(Base):
    """One state change, written in the transaction that makes it (a quota refusal in its own):
    who (user name and role; None for the operator's CLI), when, what (``action`` such as
    ``run.cancel``, on ``target`` = ``run:12``) and the state before and after."""

    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, index=True)
    user: Mapped[str | None] = mapped_column(String(200), index=True, default=None)
    role: Mapped[str | None] = mapped_column(String(16), default=None)
    action: Mapped[str] = mapped_column(String(64), index=True)
    target: Mapped[str | None] = mapped_column(String(64), default=None)
    before: Mapped[dict[str, Any] | None] = mapped_column(Json, default=None)
    after: Mapped[dict[str, Any] | None] = mapped_column(Json, default=None)
