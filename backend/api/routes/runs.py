"""/api/runs: submit, list, read, tag, cancel and delete runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status

from backend.api.deprecation import warn_renamed
from backend.api.deps import EnqueueDep, Principal, ReadAccess, SessionDep, SettingsDep, TokenDep, ensure_may_change
from backend.api.errors import FORBIDDEN, NOT_FOUND, QUOTA, config_validation_error, conflict_responses
from backend.db import audit
from backend.db import runs as repo
from backend.db.models import Run
from backend.schemas import RunCreate, RunPublic, RunsPublic, RunState, RunUpdate, Tag, UserName
from backend.services.configs import queue_for, run_gpus, validate_config
from backend.services.priority import check_priority
from backend.services.quotas import Quotas, admit, run_work
from backend.services.submit import enqueue_or_fail
from trainer.spec.config import ConfigError

router = APIRouter(prefix="/runs", tags=["runs"])

RunId = Annotated[int, Path(ge=1, le=2**63 - 1, description="Run id.")]


def _changeable(session, run_id: int, who: Principal, verb: str) -> Run:
    """The run, if ``who`` may change it (404 / 403 otherwise: nothing is changed)."""
    run = repo.get_run(session, run_id)
    ensure_may_change(who, run.owner, f"run {run_id}")
    return run


@router.post("", response_model=RunPublic, status_code=status.HTTP_201_CREATED,
             responses={**FORBIDDEN, **QUOTA, 503: {"description": "Broker unreachable; the run is marked failed."}})
def create_run(body: RunCreate, session: SessionDep, settings: SettingsDep, enqueue: EnqueueDep, who: TokenDep,
               response: Response):
    """Validate the config (422 names each bad field) and the priority against the caller's role's
    cap (422 naming ``priority``), check the caller's quotas (429 names the limit and the usage),
    store a queued run owned by the caller, enqueue it."""
    warn_renamed(response, body.renamed)  # a renamed config field: stored under its new name, said in a header
    try:
        # cross-field rules and the operator's policy; per-field rules already ran on RunCreate
        cfg = validate_config(body.config, settings.run_policy)
    except ConfigError as e:
        raise config_validation_error(e, ["body", "config"]) from None
    check_priority(body.priority, settings, who.role)
    admit(session, Quotas.of(settings), who.user, who.role, [run_work(cfg)], [run_gpus(cfg)])
    run = repo.create_run(session, cfg.model_dump(mode="json"), queue=queue_for(cfg, settings.cpu_queue, settings.gpu_queue),
                          name=body.name, tags=body.tags, notes=body.notes, owner=who.user, gpus=run_gpus(cfg),
                          priority=body.priority)
    audit.record(session, "run.create", user=who.user, role=who.role, target=f"run:{run.id}", after=audit.run_state(run))
    session.commit()
    return enqueue_or_fail(session, enqueue, [run])[0]


@router.get("", response_model=RunsPublic, dependencies=[ReadAccess])
def list_runs(
    session: SessionDep,
    status_: Annotated[list[RunState] | None, Query(alias="status", description=(
        "Repeat to match any of several. 'waiting': running runs that wait for their GPUs (waiting_for set; their "
        "state is 'waiting'); 'running' matches every running run, the waiting ones too."))] = None,
    method: Annotated[list[str] | None, Query(max_length=8)] = None,
    tag: Tag | None = None,
    sweep_id: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
    owner: Annotated[UserName | None, Query(description="Only runs of this user (see GET /api/me for yours).")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
):
    """Newest first; ``count`` is the total before limit/offset. Each run's ``state`` shows a
    running run that waits for its GPUs as ``waiting``, with ``waiting_for`` and ``waiting_since``."""
    runs, total = repo.list_runs(session, status=status_, method=method, tag=tag, sweep_id=sweep_id, owner=owner, limit=limit, offset=offset)
    return RunsPublic(data=runs, count=total, limit=limit, offset=offset)


@router.get("/{run_id}", response_model=RunPublic, dependencies=[ReadAccess], responses=NOT_FOUND)
def get_run(run_id: RunId, session: SessionDep):
    return repo.get_run(session, run_id)


@router.patch("/{run_id}", response_model=RunPublic, responses={**NOT_FOUND, **FORBIDDEN})
def update_run(run_id: RunId, body: RunUpdate, session: SessionDep, who: TokenDep):
    """Replace tags and/or notes (a member: only of their own runs)."""
    before = audit.run_state(_changeable(session, run_id, who, "patch"))
    run = repo.update_run(session, run_id, tags=body.tags, notes=body.notes)
    audit.record(session, "run.patch", user=who.user, role=who.role, target=f"run:{run_id}", before=before,
                 after=audit.run_state(run))
    session.commit()
    return run


@router.post("/{run_id}/cancel", response_model=RunPublic,
             responses={**conflict_responses("the run has finished"), **FORBIDDEN})
def cancel_run(run_id: RunId, session: SessionDep, who: TokenDep):
    """Queued: cancelled at once. Running: ``cancel_requested`` is set and the worker stops within
    one step. A member may cancel only their own runs."""
    before = audit.run_state(_changeable(session, run_id, who, "cancel"))
    run = repo.request_cancel(session, run_id)
    audit.record(session, "run.cancel", user=who.user, role=who.role, target=f"run:{run_id}", before=before,
                 after=audit.run_state(run))
    session.commit()
    return run


@router.delete("/{run_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses={**conflict_responses("the run has not finished"), **FORBIDDEN})
def delete_run(run_id: RunId, session: SessionDep, who: TokenDep):
    """Delete a finished run and its metrics, evals and checkpoint records (409 otherwise; a
    member: only their own runs)."""
    before = audit.run_state(_changeable(session, run_id, who, "delete"))
    repo.delete_run(session, run_id)
    audit.record(session, "run.delete", user=who.user, role=who.role, target=f"run:{run_id}", before=before)
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)
