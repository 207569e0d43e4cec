"""Access: API tokens and their users, the caller's own identity and quota, and the audit log."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from backend.schemas.base import InputModel, Label, Role, UserName, UtcDatetime


class TokenCreate(InputModel):
    """POST /api/tokens (admins): a token for ``user`` (default: the user called ``name``, created if new)."""

    name: Label = Field(description="A label for the token (who or what uses it).")
    role: Role = Field("member", description="admin: everything; member: submit and change own runs; viewer: read only.")
    user: UserName | None = Field(None, description="The user the token belongs to; default: ``name``.")


class TokenPublic(BaseModel):
    id: int
    name: str
    user: str
    role: Role
    created_at: UtcDatetime
    last_used_at: UtcDatetime | None
    revoked_at: UtcDatetime | None


class TokenCreated(TokenPublic):
    token: str = Field(description="The token itself, shown only in this answer (the store keeps its hash).")


class TokensPublic(BaseModel):
    data: list[TokenPublic]
    count: int


class QuotaUsage(BaseModel):
    limits: dict[str, int] = Field(description="The operator's quotas by variable name (0 = no limit).")
    queued: int
    running: int
    running_gpus: int = Field(0, description="GPUs held by the user's running runs (AERO_QUOTA_RUNNING_GPUS counts them).")


class MePublic(BaseModel):
    """GET /api/me: who the token belongs to and what it may do."""

    user: str
    role: Role
    token: str = Field(description="The token's name.")
    may_submit: bool
    may_change_others: bool
    max_priority: int = Field(0, description="The highest run priority this role may submit (the operator's "
                              "AERO_PRIORITY_MAX_ADMIN / AERO_PRIORITY_MAX_MEMBER; 0 for a viewer).")
    quota: QuotaUsage


class AuditEventPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    at: UtcDatetime
    user: str | None = Field(description="Who made the change; null for the operator at the command line.")
    role: str | None
    action: str
    target: str | None = Field(description="What changed, as kind:id (run:12, sweep:3, token:5).")
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class AuditPublic(BaseModel):
    data: list[AuditEventPublic]
    count: int = Field(description="Events matching the filters, before limit/offset.")
    limit: int
    offset: int
