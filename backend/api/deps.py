"""Annotated dependencies (full-stack-fastapi-template style): ``SessionDep``, ``SettingsDep``,
``TokenDep`` (state-changing calls), ``ReadAccess`` (reads, when AUTH_PROTECT_READS is on)
and ``EnqueueDep``. The app keeps its settings, sessionmaker and enqueuer on ``app.state``,
so tests build apps with their own store and queue."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from backend.db.models import ApiToken
from backend.db.tokens import verify_token
from backend.queue import Enqueuer
from backend.settings import Settings

bearer = HTTPBearer(auto_error=False, description="An API token from `aero token create NAME`.")


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


def get_sessionmaker(request: Request) -> sessionmaker[Session]:
    return request.app.state.sessionmaker


async def get_session(request: Request) -> AsyncIterator[Session]:
    """One session per request. Async on purpose: creating a Session does no I/O, so this
    saves two thread-pool hops per request (a sync generator dependency enters and exits in
    the pool); closing returns the connection (a ROLLBACK round trip, well under a ms)."""
    session = request.app.state.sessionmaker()
    try:
        yield session
    finally:
        session.close()


def get_enqueuer(request: Request) -> Enqueuer:
    return request.app.state.enqueue


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
SessionDep = Annotated[Session, Depends(get_session)]
EnqueueDep = Annotated[Enqueuer, Depends(get_enqueuer)]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]

_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


def _check(session: Session, creds: HTTPAuthorizationCredentials | None) -> ApiToken:
    if creds is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing bearer token: send 'Authorization: Bearer <token>' "
                            "(create one with `aero token create NAME`)", headers=_UNAUTHORIZED)
    token = verify_token(session, creds.credentials)
    if token is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid or revoked token", headers=_UNAUTHORIZED)
    session.commit()  # end the read transaction: long requests (SSE) must not hold a connection
    return token


def require_token(session: SessionDep, creds: Credentials) -> ApiToken:
    """Every state-changing call: a valid bearer token, else 401."""
    return _check(session, creds)


def require_read_access(session: SessionDep, settings: SettingsDep, creds: Credentials) -> ApiToken | None:
    """Reads: open unless AUTH_PROTECT_READS, then the same check as writes."""
    if not settings.auth_protect_reads:
        return None
    return _check(session, creds)


TokenDep = Annotated[ApiToken, Depends(require_token)]
ReadAccess = Depends(require_read_access)
