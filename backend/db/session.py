"""Engines and sessions.

SQLite gets WAL (readers never block the one writer), foreign keys, a 30 s busy timeout,
and SQLAlchemy-controlled ``BEGIN`` (pysqlite's own transaction handling would defer BEGIN
and break transactional DDL in migrations). Keep write transactions short and write first:
under WAL a read transaction that later tries to write can fail at once if another writer
committed in between.

PostgreSQL connections end any transaction left idle for ``AERO_DB_IDLE_TX_TIMEOUT_S`` seconds
(default 30; 0 = never). Our transactions last milliseconds; one idle that long belongs to a
process that froze between a write and its commit (SIGSTOP, a paused VM, a hung NFS read), and
its row locks would otherwise block the reaper and the worker taking the run over, forever.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import json

import orjson
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from common.env import env_seconds


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    dbapi_conn.isolation_level = None  # let SQLAlchemy emit BEGIN (see module docstring)
    cur = dbapi_conn.cursor()
    for pragma in ("journal_mode=WAL", "foreign_keys=ON", "synchronous=NORMAL", "busy_timeout=30000"):
        cur.execute(f"PRAGMA {pragma}")
    cur.close()


def _sqlite_begin(conn) -> None:
    conn.exec_driver_sql("BEGIN")


IDLE_TX_TIMEOUT_ENV = "AERO_DB_IDLE_TX_TIMEOUT_S"


def idle_tx_timeout_s() -> float:
    """``AERO_DB_IDLE_TX_TIMEOUT_S`` (seconds, >= 0; 0 = PostgreSQL's default, never)."""
    return env_seconds(IDLE_TX_TIMEOUT_ENV, 30, zero_means="never")


def _pg_session_timeouts(ms: int):
    def on_connect(dbapi_conn, _record) -> None:
        with dbapi_conn.cursor() as cur:
            cur.execute(f"SET idle_in_transaction_session_timeout = {ms}")
        dbapi_conn.commit()

    return on_connect


def _json_dumps(obj) -> str:
    try:
        return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # e.g. an int beyond 64 bits: the stdlib writes any int
        return json.dumps(obj)


def make_engine(url: str, **kwargs) -> Engine:
    """An engine for ``url``; creates the parent directory of a SQLite file (0700 when new) and
    the file itself with mode 0600 (existing ones of ours are chmod'ed 0600, journals too).

    ``postgresql://`` URLs use psycopg 3 (``postgresql+psycopg``). JSON columns go through
    orjson (several times faster than the stdlib on metric rows)."""
    kwargs.setdefault("json_serializer", _json_dumps)
    kwargs.setdefault("json_deserializer", orjson.loads)
    u = make_url(url)
    if u.drivername == "postgresql":
        u = u.set(drivername="postgresql+psycopg")
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:" and not u.database.startswith("file:"):
            from backend.settings import private_file

            db = Path(u.database).expanduser()
            if not db.parent.exists():
                db.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            private_file(db, create=True)  # 0600, and SQLite gives -wal/-shm the file's mode
        kwargs.setdefault("connect_args", {"check_same_thread": False, "timeout": 30})
        engine = create_engine(u, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 20)
    engine = create_engine(u, **kwargs)
    if (ms := round(idle_tx_timeout_s() * 1000)) > 0:
        event.listen(engine, "connect", _pg_session_timeouts(ms))
    return engine


@lru_cache(maxsize=16)
def get_engine(url: str) -> Engine:
    """One shared engine (and connection pool) per URL in this process."""
    return make_engine(url)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    # expire_on_commit=False: objects stay readable after commit (routes serialise them then).
    return sessionmaker(engine, expire_on_commit=False)


def autocommit_reads(session: Session) -> None:
    """On PostgreSQL, let this session's next statements run outside a transaction: a read of a
    few statements then costs no BEGIN and ROLLBACK round trips (each statement sees what was
    committed when it started). Only for reads whose statements need no common snapshot. A no-op
    on SQLite (its BEGIN costs no round trip) and once the session holds a connection."""
    if not session.in_transaction() and session.get_bind().dialect.name == "postgresql":
        session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})


def bounded_lock_wait(session: Session, seconds: float) -> None:
    """On PostgreSQL, make this transaction's statements give up (LockNotAvailable) after waiting
    ``seconds`` for a row lock instead of waiting for ever; a no-op on SQLite (busy timeout)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text(f"SET LOCAL lock_timeout = {round(seconds * 1000)}"))


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """``with session_scope(settings.database_url) as s:`` commits on success, rolls back on error.
    For workers and scripts; the API uses ``SessionDep``."""
    with make_sessionmaker(get_engine(url))() as session, session.begin():
        yield session
