"""Annotated dependencies (full-stack-fastapi-template style): ``SessionDep``, ``SettingsDep``,
``TokenDep`` (state-changing calls: an admin or member token, else 401/403), ``AdminDep``
(admin-only calls), ``AnyTokenDep`` (any valid token, viewers too), ``ReadAccess`` (reads,
when AUTH_PROTECT_READS is on) and ``EnqueueDep``.

Roles (``backend.db.models.ROLES``): ``admin`` may do everything; ``member`` may submit and
change its own runs and sweeps (:func:`ensure_may_change`); ``viewer`` may only read. The app keeps its settings, sessionmaker and enqueuer on ``app.state``,
so tests build apps with their own store and queue."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from backend.db.models import ApiToken
from backend.db.tokens import user_name, verify_token
from backend.queue import Enqueuer
from backend.settings import Settings

bearer = HTTPBearer(auto_error=False, description="An API token from `aero token create NAME`.")


# The trivial dependencies are async: FastAPI runs a sync one in the thread pool, and each such
# hop costs a thread handoff and a GIL round trip on every request.
async def get_settings_dep(request: Request) -> Settings:
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


async def get_enqueuer(request: Request) -> Enqueuer:
    return request.app.state.enqueue


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
SessionDep = Annotated[Session, Depends(get_session)]
EnqueueDep = Annotated[Enqueuer, Depends(get_enqueuer)]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]

_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's user and role."""

    user: str
    role: str
    token_id: int
    token_name: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def may_write(self) -> bool:
        return self.role in ("admin", "member")


def _check(session: Session, creds: HTTPAuthorizationCredentials | None) -> Principal:
    if creds is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing bearer token: send 'Authorization: Bearer <token>' "
                            "(create one with `aero token create NAME`)", headers=_UNAUTHORIZED)
    token: ApiToken | None = verify_token(session, creds.credentials)
    if token is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid or revoked token", headers=_UNAUTHORIZED)
    who = Principal(user=user_name(session, token), role=token.role, token_id=token.id, token_name=token.name)
    session.commit()  # end the read transaction: long requests (SSE) must not hold a connection
    return who


def _forbidden(why: str) -> HTTPException:
    return HTTPException(status.HTTP_403_FORBIDDEN, why)


def require_token(session: SessionDep, creds: Credentials) -> Principal:
    """Every state-changing call: a valid bearer token (else 401) of an admin or member (else 403)."""
    who = _check(session, creds)
    if not who.may_write:
        raise _forbidden(f"token {who.token_name!r} has role {who.role}, which may only read; "
                         "ask an admin for a member token (`aero token create NAME --role member`)")
    return who


def require_admin(session: SessionDep, creds: Credentials) -> Principal:
    """Admin-only calls (tokens, users, the audit log): an admin token, else 401/403."""
    who = _check(session, creds)
    if not who.is_admin:
        raise _forbidden(f"token {who.token_name!r} has role {who.role}; this call needs an admin token")
    return who


def require_any_token(session: SessionDep, creds: Credentials) -> Principal:
    """Calls about the caller itself (``/api/me``): any valid token, viewers included."""
    return _check(session, creds)


def ensure_may_change(who: Principal, owner: str | None, what: str) -> None:
    """403 unless ``who`` may change ``what`` (e.g. ``run 12``) owned by ``owner``: admins may
    change anything, members only what they own (never an unowned one, stored before users)."""
    if who.is_admin or (owner is not None and owner == who.user):
        return
    whose = f"belongs to {owner}" if owner is not None else "has no recorded owner"
    raise _forbidden(f"{what} {whose}; a {who.role} may change only their own (an admin may change any)")


async def require_read_access(session: SessionDep, settings: SettingsDep, creds: Credentials) -> Principal | None:
    """Reads: open unless AUTH_PROTECT_READS, then any valid token (viewers included). Async, so
    an open read costs no thread hop; the token check's store reads run in the thread pool."""
    if not settings.auth_protect_reads:
        return None
    return await run_in_threadpool(_check, session, creds)


TokenDep = Annotated[Principal, Depends(require_token)]
AdminDep = Annotated[Principal, Depends(require_admin)]
AnyTokenDep = Annotated[Principal, Depends(require_any_token)]
ReadAccess = Depends(require_read_access)
