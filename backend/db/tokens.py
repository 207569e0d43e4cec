"""API tokens. A token is ``aero_`` + 43 URL-safe random characters (256 bits); the store keeps
only its SHA-256 hex digest, so a leaked database does not leak usable tokens."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from backend.db.models import ApiToken, utcnow

TOKEN_PREFIX = "aero_"
LAST_USED_RESOLUTION = timedelta(minutes=1)  # write last_used_at at most once a minute per token


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def create_token(session: Session, name: str) -> tuple[ApiToken, str]:
    """Create a token named ``name``; returns the row and the plaintext (shown once)."""
    token = new_token()
    row = ApiToken(name=name, token_hash=hash_token(token))
    session.add(row)
    session.flush()
    return row, token


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


def list_tokens(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))
