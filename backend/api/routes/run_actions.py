"""/api/runs/{id}/resume and /api/runs/{id}/alerts: run a failed or cancelled run again from its
last checkpoint; read its alert rules and the ones that fired (trainer/spec/alerts.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from backend.api.deps import EnqueueDep, ReadAccess, SessionDep, SettingsDep, TokenDep, ensure_may_change
from backend.api.errors import FORBIDDEN, NOT_FOUND, QUOTA, config_validation_error, conflict_responses
from backend.db import alerts as alert_repo
from backend.db import audit
from backend.db import runs as repo
from backend.schemas import AlertsPublic, RunPublic
from backend.services.configs import validate_config
from backend.services.quotas import Quotas, admit, run_work
from backend.services.submit import enqueue_or_fail
from trainer.spec.config import ConfigError

router = APIRouter(prefix="/runs", tags=["runs"])

RunId = Annotated[int, Path(ge=1, le=2**63 - 1, description="Run id.")]


@router.post("/{run_id}/resume", response_model=RunPublic,
             responses={**conflict_responses("only a failed or cancelled run resumes"), **FORBIDDEN, **QUOTA,
                        422: {"description": "The stored config no longer passes the operator's policy."},
                        503: {"description": "Broker unreachable; the run is marked failed again."}})
def resume_run(run_id: RunId, session: SessionDep, settings: SettingsDep, enqueue: EnqueueDep, who: TokenDep):
    """Queue a failed or cancelled run again: its worker resumes it from the last checkpoint (the
    steps after it are trained again; from the start when it has none). Its config is checked
    against today's operator policy first, and the queued run counts against its owner's quotas
    (429 over them). A member may resume only their own runs."""
    run = repo.get_run(session, run_id)
    ensure_may_change(who, run.owner, f"run {run_id}")
    try:
        cfg = validate_config(run.config, settings.run_policy)
    except ConfigError as e:
        raise config_validation_error(e, ["config"]) from None
    before = audit.run_state(run)
    admit(session, Quotas.of(settings), run.owner or who.user, who.role, [run_work(cfg)])
    run = repo.resume_run(session, run_id)
    audit.record(session, "run.resume", user=who.user, role=who.role, target=f"run:{run_id}", before=before,
                 after=audit.run_state(run))
    session.commit()
    return enqueue_or_fail(session, enqueue, [run])[0]


@router.get("/{run_id}/alerts", response_model=AlertsPublic, dependencies=[ReadAccess], responses=NOT_FOUND)
def run_alerts(run_id: RunId, session: SessionDep):
    """The run's alert rules, whether it posts to a webhook, the rules that fired and why it
    stopped early (if a rule stopped it)."""
    run = repo.get_run(session, run_id)
    alerts = (run.config or {}).get("alerts") or {}
    return AlertsPublic(rules=list(alerts.get("rules") or []), webhook=bool(alerts.get("webhook_url")),
                        events=alert_repo.list_alerts(session, run_id), stop_reason=run.stop_reason)
