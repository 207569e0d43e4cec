"""API tokens and their users. A token is ``aero_`` + 43 URL-safe random characters (256 bits);
the store keeps only its SHA-256 hex digest, so a leaked database does not leak usable tokens.

A token belongs to a user (created on first use of the name) and carries a role:
``admin`` (everything, tokens and users too), ``member`` (submit; change only their own runs
and sweeps), ``viewer`` (read only)."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from backend.db.models import ROLES, ApiToken, User, utcnow

TOKEN_PREFIX = "aero_"
LAST_USED_RESOLUTION = timedelta(minutes=1)  # write last_used_at at most once a minute per token


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def get_or_create_user(session: Session, name: str) -> User:
    """The user called ``name``, created if new."""
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        user = User(name=name)
        session.add(user)
        session.flush()
    return user


def create_token(session: Session, name: str, role: str = "admin", user: str | None = None) -> tuple[ApiToken, str]:
    """Create a token named ``name`` with ``role`` for ``user`` (default: the user called ``name``,
    created if new); returns the row and the plaintext (shown once)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    token = new_token()
    owner = get_or_create_user(session, user or name)
    row = ApiToken(name=name, token_hash=hash_token(token), role=role, user_id=owner.id)
    session.add(row)
    session.flush()
    return row, token


def user_name(session: Session, token: ApiToken) -> str:
    """The name of the user ``token`` belongs to (the token's own name for a token without one)."""
    if token.user_id is None:
        return token.name
    return session.scalar(select(User.name).where(User.id == token.user_id)) or token.name


def verify_token(session: Session, token: str) -> ApiToken | None:
    """The live token row matching ``token``, or None. Refreshes ``last_used_at`` (coarsely)."""
    if not token or len(token) > 512:
        return None
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(token), ApiToken.revoked_at.is_(None)))
    if row is None:
        return None
    now = utcnow()
    if row.last_used_at is None or now - row.last_used_at > LAST_USED_RESOLUTION:
        try:  # best effort: a busy SQLite writer must not fail the request
            session.execute(update(ApiToken).where(ApiToken.id == row.id).values(last_used_at=now))
            session.commit()
        except OperationalError:
            session.rollback()
    return row


def revoke_token(session: Session, name: str) -> int:
    """Revoke every live token called ``name``; returns how many."""
    res = session.execute(update(ApiToken).where(ApiToken.name == name, ApiToken.revoked_at.is_(None)).values(revoked_at=utcnow()))
    return res.rowcount


def revoke_token_id(session: Session, token_id: int) -> ApiToken | None:
    """Revoke the token ``token_id`` (idempotent); the row, or None when there is none."""
    row = session.get(ApiToken, token_id)
    if row is not None and row.revoked_at is None:
        row.revoked_at = utcnow()
        session.flush()
    return row


def has_live_admin(session: Session) -> bool:
    """Whether any unrevoked admin token exists (``aero token create``'s default role reads it)."""
    stmt = select(ApiToken.id).where(ApiToken.role == "admin", ApiToken.revoked_at.is_(None)).limit(1)
    return session.scalar(stmt) is not None


def list_tokens(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))


def list_tokens_with_users(session: Session) -> list[tuple[ApiToken, str]]:
    """Every token with its user's name, oldest first."""
    rows = session.execute(select(ApiToken, User.name).outerjoin(User, User.id == ApiToken.user_id).order_by(ApiToken.id))
    return [(tok, name or tok.name) for tok, name in rows.all()]
