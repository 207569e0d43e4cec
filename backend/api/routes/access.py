"""Who may do what: /api/me (any token), /api/tokens and /api/users and /api/audit (admins)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, status
from sqlalchemy import select

from backend.api.deps import AdminDep, AnyTokenDep, SessionDep, SettingsDep
from backend.db import audit
from backend.db.models import User
from backend.db.tokens import create_token, list_tokens_with_users, revoke_token_id, user_name
from backend.schemas import (
    AuditPublic,
    MePublic,
    QuotaUsage,
    TokenCreate,
    TokenCreated,
    TokenPublic,
    TokensPublic,
    UserName,
)
from backend.services.priority import priority_cap
from backend.services.quotas import usage

router = APIRouter(tags=["access"])

ADMIN_ONLY: dict[int | str, dict] = {401: {"description": "No valid token."}, 403: {"description": "Not an admin token."}}


def _quota(session, settings, user: str) -> QuotaUsage:
    limits = {"AERO_QUOTA_ACTIVE_RUNS": settings.quota_active_runs, "AERO_QUOTA_RUNNING_RUNS": settings.quota_running_runs,
              "AERO_QUOTA_RUN_WORK": settings.quota_run_work, "AERO_QUOTA_RUNNING_GPUS": settings.quota_running_gpus}
    return QuotaUsage(limits=limits, **usage(session, user))


@router.get("/me", response_model=MePublic, responses={401: {"description": "No valid token."}})
def me(session: SessionDep, settings: SettingsDep, who: AnyTokenDep):
    """The caller's user, role, what the role allows, and their quota usage (the dashboard hides
    the actions a token may not take from this)."""
    return MePublic(user=who.user, role=who.role, token=who.token_name, may_submit=who.may_write,
                    may_change_others=who.is_admin, max_priority=priority_cap(settings, who.role),
                    quota=_quota(session, settings, who.user))


def _token_public(tok, user: str) -> dict:
    return dict(id=tok.id, name=tok.name, user=user, role=tok.role, created_at=tok.created_at,
                last_used_at=tok.last_used_at, revoked_at=tok.revoked_at)


@router.get("/tokens", response_model=TokensPublic, responses=ADMIN_ONLY)
def list_tokens(session: SessionDep, _: AdminDep):
    """Every token (never the token itself: only its hash is stored), oldest first."""
    rows = list_tokens_with_users(session)
    return TokensPublic(data=[TokenPublic(**_token_public(t, u)) for t, u in rows], count=len(rows))


@router.post("/tokens", response_model=TokenCreated, status_code=status.HTTP_201_CREATED, responses=ADMIN_ONLY)
def create_token_route(body: TokenCreate, session: SessionDep, who: AdminDep):
    """Create a token with a role for a user (created if new); the answer is the only time the
    token is shown."""
    row, token = create_token(session, body.name, body.role, body.user)
    public = _token_public(row, user_name(session, row))
    audit.record(session, "token.create", user=who.user, role=who.role, target=f"token:{row.id}",
                 after={"name": row.name, "user": public["user"], "role": row.role})
    session.commit()
    return TokenCreated(**public, token=token)


@router.delete("/tokens/{token_id}", response_model=TokenPublic, responses={**ADMIN_ONLY, 404: {"description": "Unknown id."}})
def revoke_token(token_id: Annotated[int, Path(ge=1, le=2**63 - 1)], session: SessionDep, who: AdminDep):
    """Revoke a token (it stops working at once); revoking a revoked token changes nothing."""
    row = revoke_token_id(session, token_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"token {token_id} not found")
    public = _token_public(row, user_name(session, row))
    audit.record(session, "token.revoke", user=who.user, role=who.role, target=f"token:{token_id}",
                 before={"name": row.name, "user": public["user"], "role": row.role}, after={"revoked_at": str(row.revoked_at)})
    session.commit()
    return TokenPublic(**public)


@router.get("/users", response_model=list[str], responses=ADMIN_ONLY)
def list_users(session: SessionDep, _: AdminDep):
    """Every user's name (users are created with their first token)."""
    return list(session.scalars(select(User.name).order_by(User.name)))


@router.get("/audit", response_model=AuditPublic, responses=ADMIN_ONLY)
def read_audit(
    session: SessionDep,
    _: AdminDep,
    user: Annotated[UserName | None, Query(description="Only changes made by this user.")] = None,
    action: Annotated[list[audit.Action] | None, Query(description="Repeat to match any of several.")] = None,
    target: Annotated[str | None, Query(max_length=64, pattern=r"^[a-z]+:\d+$", description="e.g. run:12")] = None,
    since: Annotated[datetime | None, Query(description="Only events at or after this time (UTC).")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
):
    """The audit log, newest first: every state change with who, when, and the state before and after."""
    if since is not None and since.tzinfo is not None:
        since = since.astimezone(UTC).replace(tzinfo=None)  # the store keeps naive UTC
    events, total = audit.list_events(session, user=user, action=action, target=target, since=since, limit=limit, offset=offset)
    return AuditPublic(data=events, count=total, limit=limit, offset=offset)
