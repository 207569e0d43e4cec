"""Step details: each step's stored rollout sample and histograms (table ``step_details``).

Written by the worker's sink (``MetricSink.log_detail``), idempotent on (run, step) like the
step metrics; a resume deletes the rows past its checkpoint (:func:`delete_after`, called by
``backend.db.metrics.delete_steps_after``). What a row holds and the sample rule:
trainer/platform/step_detail.py; the retention rule: docs/metrics.md "Rollouts and histograms".

The texts are stored as the trainer clipped them. Everything read back is plain data: the
API serves it as JSON, the dashboard renders it as text, the CLI strips control characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from backend.db.models import StepDetail, utcnow
from backend.db.upsert import upsert

STAGE_KINDS = ("explore", "rescue", "round", "curated out")


def _clean_rollout(r: Mapping[str, Any]) -> dict[str, Any]:
    """A stored rollout: text fields without NUL (PostgreSQL's JSON refuses it), whatever the writer."""
    return {k: v.replace("\x00", "\ufffd") if isinstance(v, str) else v for k, v in r.items()}


def upsert_step_details(session: Session, run_id: int, details: Mapping[int, Mapping[str, Any]]) -> int:
    """Store {step: {"rollouts": [...], "histograms": {...}}} for one run; a step given again
    replaces its row. The caller commits. Returns the rows written."""
    now = utcnow()
    rows = [{"run_id": run_id, "step": int(step), "rollouts": [_clean_rollout(r) for r in d.get("rollouts") or []],
             "histograms": dict(d.get("histograms") or {}), "logged_at": now} for step, d in sorted(details.items())]
    return upsert(session, StepDetail, rows, ("run_id", "step"))


def delete_after(session: Session, run_id: int, step: int) -> int:
    """Delete a run's details after ``step`` (a resume from that step's checkpoint)."""
    return session.execute(delete(StepDetail).where(StepDetail.run_id == run_id, StepDetail.step > step)).rowcount


def detail_steps(session: Session, run_id: int) -> list[int]:
    """The steps with a stored detail, ascending."""
    return list(session.scalars(select(StepDetail.step).where(StepDetail.run_id == run_id).order_by(StepDetail.step)))


@dataclass(frozen=True)
class RolloutFilter:
    """Which stored rollouts of a step to list: by stratum, stage kind (``STAGE_KINDS``) and reward range."""

    stratum: str | None = None
    stage: str | None = None
    min_reward: float | None = None
    max_reward: float | None = None

    def keep(self, r: Mapping[str, Any]) -> bool:
        reward = r.get("reward")
        stage = str(r.get("stage", ""))
        return ((self.stratum is None or r.get("stratum") == self.stratum)
                and (self.stage is None or stage == self.stage or stage.startswith(self.stage + " "))
                and (self.min_reward is None or (reward is not None and reward >= self.min_reward))
                and (self.max_reward is None or (reward is not None and reward <= self.max_reward)))


def read_rollouts(session: Session, run_id: int, step: int, filt: RolloutFilter, offset: int,
                  limit: int) -> tuple[int, list[dict[str, Any]]] | None:
    """(rollouts matching ``filt`` in all, the page [offset, offset + limit)) of one step, or None
    when the step has no stored detail."""
    rows = session.scalars(select(StepDetail.rollouts).where(StepDetail.run_id == run_id, StepDetail.step == step)).first()
    if rows is None:
        return None
    kept = [r for r in rows if filt.keep(r)]
    return len(kept), kept[offset:offset + limit]


def read_histograms(session: Session, run_id: int) -> list[tuple[int, dict[str, Any]]]:
    """(step, histograms) of every stored step, ascending; reads the histogram column only."""
    q = select(StepDetail.step, StepDetail.histograms).where(StepDetail.run_id == run_id).order_by(StepDetail.step)
    return [(int(s), h) for s, h in session.execute(q).all()]
