"""/api/runs/{id}/rollouts, /histograms, /metrics/keys: what a run's steps generated, their
distributions, and every metric key the run logged (for key pickers)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query

from backend.api.deps import ReadAccess, SessionDep
from backend.api.errors import NOT_FOUND
from backend.api.routes.runs import RunId
from backend.db import rollouts as store
from backend.db.runs import get_run
from backend.db.series import keys_of
from backend.schemas import HistogramsPublic, MetricKeysPublic, RolloutsPublic
from backend.services.step_details import histograms_body

router = APIRouter(prefix="/runs", tags=["rollouts"], dependencies=[ReadAccess])

MAX_PAGE = 500


@router.get("/{run_id}/rollouts", response_model=RolloutsPublic, responses=NOT_FOUND)
def list_rollouts(
    run_id: RunId,
    session: SessionDep,
    step: Annotated[int | None, Query(ge=0, le=2**31 - 1, description="The step; default: the last step with a sample.")] = None,
    stratum: Annotated[Literal["rescue", "low", "high"] | None, Query(description="Only this stratum.")] = None,
    stage: Annotated[Literal[store.STAGE_KINDS] | None, Query(  # type: ignore[valid-type]
        description='Only this stage: explore, rescue (any round), round (DAPO\'s later batches), "curated out".')] = None,
    min_reward: Annotated[float | None, Query(ge=-1e9, le=1e9, description="Only rewards >= this.")] = None,
    max_reward: Annotated[float | None, Query(ge=-1e9, le=1e9, description="Only rewards <= this.")] = None,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
):
    """A page of one step's stored rollout sample (prompt, response, reward, advantage, stratum,
    round, length, truncation), filtered. Model text is served as stored: clipped, untrusted."""
    get_run(session, run_id)
    steps = store.detail_steps(session, run_id)
    if step is None and not steps:
        return RolloutsPublic(run_id=run_id, step=0, data=[], count=0, offset=offset, limit=limit, steps=[])
    at = steps[-1] if step is None else step
    page = store.read_rollouts(session, run_id, at, store.RolloutFilter(stratum, stage, min_reward, max_reward), offset, limit)
    if page is None:
        raise HTTPException(404, f"run {run_id} has no stored rollouts at step {at}")
    count, data = page
    return {"run_id": run_id, "step": at, "data": data, "count": count, "offset": offset, "limit": limit, "steps": steps}


@router.get("/{run_id}/histograms", response_model=HistogramsPublic, responses=NOT_FOUND)
def get_histograms(
    run_id: RunId,
    session: SessionDep,
    max_steps: Annotated[int, Query(ge=1, le=10_000, description="Decimate to at most this many steps (the last kept).")] = 500,
):
    """Per-step fixed-bin histograms of per-prompt pass rate and response length (a heatmap over steps)."""
    get_run(session, run_id)
    return histograms_body(run_id, store.read_histograms(session, run_id), max_steps)


@router.get("/{run_id}/metrics/keys", response_model=MetricKeysPublic, responses=NOT_FOUND)
def metric_keys(run_id: RunId, session: SessionDep):
    """Every metric key the run logged, sorted (what Run detail and Compare offer to plot)."""
    get_run(session, run_id)
    return MetricKeysPublic(run_id=run_id, keys=keys_of(session, run_id))
