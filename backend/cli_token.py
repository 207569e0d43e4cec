"""``aero token create NAME --role ...`` and ``aero token revoke NAME`` (the CLI wraps these):
token changes made by the operator at the command line, on the configured store, each recorded
in the audit log (as made by no user: the operator's shell is not an API caller)."""

from __future__ import annotations

from sqlalchemy import select

from backend.db import audit
from backend.db.migrate import migrate
from backend.db.models import ApiToken
from backend.db.session import session_scope
from backend.db.tokens import create_token as _create
from backend.db.tokens import has_live_admin, revoke_token_id, user_name
from backend.settings import Settings, get_settings


def create_token(name: str, settings: Settings | None = None, role: str | None = None,
                 user: str | None = None) -> tuple[str, str]:
    """Create a token called ``name`` with ``role`` for ``user`` (default: the user called
    ``name``) in the configured store (migrating it first). Returns (plaintext token, role); only
    the token's SHA-256 hash is stored, so it cannot be shown again.

    Without a role, the least privilege that still lets a lab start: ``admin`` while the store
    has no live admin token (the first token, which must manage the others), else ``member``."""
    settings = settings or get_settings()
    migrate(settings.database_url)
    with session_scope(settings.database_url) as session:
        if role is None:
            role = "member" if has_live_admin(session) else "admin"
        row, token = _create(session, name, role, user)
        audit.record(session, "token.create", user=None, role=None, target=f"token:{row.id}",
                     after={"name": row.name, "user": user_name(session, row), "role": row.role})
    return token, role


def revoke_tokens(name: str, settings: Settings | None = None) -> int:
    """Revoke every live token called ``name``; returns how many."""
    settings = settings or get_settings()
    with session_scope(settings.database_url) as session:
        ids = list(session.scalars(select(ApiToken.id).where(ApiToken.name == name, ApiToken.revoked_at.is_(None))))
        for token_id in ids:
            row = revoke_token_id(session, token_id)
            assert row is not None
            audit.record(session, "token.revoke", user=None, role=None, target=f"token:{token_id}",
                         before={"name": row.name, "user": user_name(session, row), "role": row.role},
                         after={"revoked_at": str(row.revoked_at)})
    return len(ids)
