"""/api/runs: submit, list, read, tag, cancel and delete runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status

from backend.api.deps import EnqueueDep, ReadAccess, SessionDep, SettingsDep, TokenDep
from backend.api.errors import NOT_FOUND, config_validation_error, conflict_responses
from backend.db import runs as repo
from backend.schemas import RunCreate, RunPublic, RunsPublic, RunStatus, RunUpdate, Tag
from backend.services.configs import queue_for, validate_config
from backend.services.submit import enqueue_or_fail
from trainer.config import ConfigError

router = APIRouter(prefix="/runs", tags=["runs"])

RunId = Annotated[int, Path(ge=1, le=2**63 - 1, description="Run id.")]


@router.post("", response_model=RunPublic, status_code=status.HTTP_201_CREATED,
             responses={503: {"description": "Broker unreachable; the run is marked failed."}})
def create_run(body: RunCreate, session: SessionDep, settings: SettingsDep, enqueue: EnqueueDep, _: TokenDep):
    """Validate the config (422 names each bad field), store a queued run, enqueue it."""
    try:
        # cross-field rules and the operator's policy; per-field rules already ran on RunCreate
        cfg = validate_config(body.config, settings.run_policy)
    except ConfigError as e:
        raise config_validation_error(e, ["body", "config"]) from None
    run = repo.create_run(session, cfg.model_dump(mode="json"), queue=queue_for(cfg, settings.cpu_queue, settings.gpu_queue),
                          name=body.name, tags=body.tags, notes=body.notes)
    session.commit()
    return enqueue_or_fail(session, enqueue, [run])[0]


@router.get("", response_model=RunsPublic, dependencies=[ReadAccess])
def list_runs(
    session: SessionDep,
    status_: Annotated[list[RunStatus] | None, Query(alias="status", description="Repeat to match any of several.")] = None,
    method: Annotated[list[str] | None, Query(max_length=8)] = None,
    tag: Tag | None = None,
    sweep_id: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
):
    """Newest first; ``count`` is the total before limit/offset."""
    runs, total = repo.list_runs(session, status=status_, method=method, tag=tag, sweep_id=sweep_id, limit=limit, offset=offset)
    return RunsPublic(data=runs, count=total, limit=limit, offset=offset)


@router.get("/{run_id}", response_model=RunPublic, dependencies=[ReadAccess], responses=NOT_FOUND)
def get_run(run_id: RunId, session: SessionDep):
    return repo.get_run(session, run_id)


@router.patch("/{run_id}", response_model=RunPublic, responses=NOT_FOUND)
def update_run(run_id: RunId, body: RunUpdate, session: SessionDep, _: TokenDep):
    """Replace tags and/or notes."""
    run = repo.update_run(session, run_id, tags=body.tags, notes=body.notes)
    session.commit()
    return run


@router.post("/{run_id}/cancel", response_model=RunPublic, responses=conflict_responses("the run has finished"))
def cancel_run(run_id: RunId, session: SessionDep, _: TokenDep):
    """Queued: cancelled at once. Running: ``cancel_requested`` is set and the worker stops within one step."""
    run = repo.request_cancel(session, run_id)
    session.commit()
    return run


@router.delete("/{run_id}", status_code=status.HTTP_204_NO_CONTENT, responses=conflict_responses("the run has not finished"))
def delete_run(run_id: RunId, session: SessionDep, _: TokenDep):
    """Delete a finished run and its metrics, evals and checkpoint records (409 otherwise)."""
    repo.delete_run(session, run_id)
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)
