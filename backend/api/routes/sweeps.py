"""/api/sweeps: grids of runs (methods x seeds x overrides)."""

from __future__ import annotations

from collections import Counter
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status
from fastapi.exceptions import RequestValidationError

from backend.api.deprecation import warn_renamed
from backend.api.deps import EnqueueDep, ReadAccess, SessionDep, SettingsDep, TokenDep, ensure_may_change
from backend.api.errors import FORBIDDEN, NOT_FOUND, QUOTA, config_validation_error, conflict_responses
from backend.db import audit
from backend.db import sweeps as repo
from backend.db.models import RUN_STATUSES
from backend.schemas import RunPublic, SweepCreate, SweepPublic, SweepsPublic, SweepSummary
from backend.services.configs import MAX_JSON_DEPTH, json_shape_issue
from backend.services.configs import run_gpus
from backend.services.priority import check_priority
from backend.services.quotas import Quotas, admit, run_work
from backend.services.sweep_submit import SweepConfigError, SweepTooLarge, build_sweep, enqueue_sweep

router = APIRouter(prefix="/sweeps", tags=["sweeps"])

SPEC_MAX_DEPTH = MAX_JSON_DEPTH + 3  # spec -> overrides -> [i] -> override

SweepId = Annotated[int, Path(ge=1, le=2**63 - 1)]


def _spec(spec: dict) -> dict:
    """The stored spec, or a stand-in for one stored before overrides had a depth limit (too deep
    to serialise: it would break every listing)."""
    why = json_shape_issue(spec, max_depth=SPEC_MAX_DEPTH, max_items=10**7)
    return spec if why is None else {"error": f"spec not shown: {why}; delete this sweep"}


def _summary(sweep, counts: dict[str, int]) -> dict:
    """SweepSummary fields from a {status: runs} count (every status listed, 0 when absent)."""
    return dict(id=sweep.id, name=sweep.name, created_at=sweep.created_at, owner=sweep.owner, spec=_spec(sweep.spec),
                status_counts={st: counts.get(st, 0) for st in RUN_STATUSES}, run_count=sum(counts.values()))


def _public(sweep, runs) -> SweepPublic:
    return SweepPublic(**_summary(sweep, Counter(r.status for r in runs)),
                       runs=[RunPublic.model_validate(r) for r in runs])


@router.post("", response_model=SweepPublic, status_code=status.HTTP_201_CREATED,
             responses={**FORBIDDEN, **QUOTA, 503: {"description": "Broker unreachable; nothing was stored."}})
def create_sweep(body: SweepCreate, session: SessionDep, settings: SettingsDep, enqueue: EnqueueDep, who: TokenDep,
                 response: Response):
    """One run per (override, method, seed), all or nothing: every config is validated before
    anything is stored (422 names the field, under ``base`` or ``overrides[i]``, or ``priority``
    above the caller's role's cap; every run gets the sweep's priority), the whole grid
    is checked against the caller's quotas (429: none of it is stored), the sweep and its runs
    are one transaction, and if the broker refuses any task they are deleted (503)."""
    warn_renamed(response, body.renamed)  # a renamed config field: read as its new one, said in a header
    check_priority(body.priority, settings, who.role)
    quotas = Quotas.of(settings)

    def admit_grid(configs) -> None:
        admit(session, quotas, who.user, who.role, [run_work(c) for c in configs], [run_gpus(c) for c in configs])

    try:
        sweep, runs = build_sweep(session, name=body.name, base=body.base, methods=list(body.methods), seeds=body.seeds,
                                  overrides=body.overrides, tags=body.tags, cpu_queue=settings.cpu_queue, gpu_queue=settings.gpu_queue,
                                  policy=settings.run_policy, owner=who.user, admit=admit_grid,
                                  priority=body.priority)
    except SweepConfigError as e:
        raise config_validation_error(e.error, e.loc) from None
    except SweepTooLarge as e:
        raise RequestValidationError([{"type": "too_large", "loc": ["body"], "msg": str(e), "input": None}]) from None
    answer = _public(sweep, runs)  # before commit: an answer that cannot be built stores nothing
    audit.record(session, "sweep.create", user=who.user, role=who.role, target=f"sweep:{sweep.id}",
                 after={"name": sweep.name, "owner": sweep.owner, "runs": [r.id for r in runs]})
    session.commit()
    enqueue_sweep(session, enqueue, sweep, runs)
    return answer


@router.get("", response_model=SweepsPublic, dependencies=[ReadAccess])
def list_sweeps(session: SessionDep, limit: Annotated[int, Query(ge=1, le=500)] = 50,
                offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0):
    """Sweeps, newest first, with a run count per status (no run bodies: see GET /sweeps/{id})."""
    sweeps, total, counts = repo.list_sweeps(session, limit, offset)
    data = [SweepSummary(**_summary(sw, counts[sw.id])) for sw in sweeps]
    return SweepsPublic(data=data, count=total, limit=limit, offset=offset)


@router.get("/{sweep_id}", response_model=SweepPublic, dependencies=[ReadAccess], responses=NOT_FOUND)
def get_sweep(sweep_id: SweepId, session: SessionDep):
    """The sweep's spec and its runs (with a count per status)."""
    return _public(repo.get_sweep(session, sweep_id), repo.sweep_runs(session, sweep_id))


@router.delete("/{sweep_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses={**conflict_responses("some of the sweep's runs are queued or running"), **FORBIDDEN})
def delete_sweep(sweep_id: SweepId, session: SessionDep, who: TokenDep):
    """Delete a sweep whose runs have all finished, with those runs and their metrics, evals and
    checkpoint records (409 while any run is queued or running: cancel them first). A member may
    delete only their own sweeps, and only when every run in it is theirs."""
    sweep = repo.get_sweep(session, sweep_id)
    ensure_may_change(who, sweep.owner, f"sweep {sweep_id}")
    runs = repo.sweep_runs(session, sweep_id)
    for run in runs:
        ensure_may_change(who, run.owner, f"run {run.id} of sweep {sweep_id}")
    before = {"name": sweep.name, "owner": sweep.owner, "runs": [r.id for r in runs]}
    repo.delete_sweep(session, sweep_id)
    audit.record(session, "sweep.delete", user=who.user, role=who.role, target=f"sweep:{sweep_id}", before=before)
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)
