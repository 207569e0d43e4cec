"""Schema migrations, run programmatically (app start, workers, ``aero token create``).

Several processes may start at once (API + workers under ``aero up``), so ``migrate`` holds
a lock while it upgrades: a PostgreSQL advisory lock, or an exclusive file lock next to a
SQLite database.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, text
from sqlalchemy.engine import make_url

from backend.db.session import get_engine

ALEMBIC_INI = Path(__file__).resolve().parent.parent / "alembic.ini"
_PG_LOCK_KEY = 0x4145524F  # "AERO"


def alembic_config(connection: Connection | None = None) -> Config:
    """The Alembic config of backend/alembic.ini, bound to ``connection`` when given."""
    cfg = Config(str(ALEMBIC_INI))
    cfg.set_main_option("script_location", str(ALEMBIC_INI.parent / "alembic"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@contextmanager
def _file_lock(url: str) -> Iterator[None]:
    database = make_url(url).database
    if not database or database == ":memory:":
        yield
        return
    lock_path = Path(database).expanduser().with_suffix(".migrate.lock")
    lock_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with os.fdopen(os.open(lock_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def migrate(url: str | None = None, revision: str = "head") -> None:
    """Upgrade the database at ``url`` (default: settings' DATABASE_URL) to ``revision``."""
    if url is None:
        from backend.settings import get_settings

        url = get_settings().database_url
    engine = get_engine(url)
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
            command.upgrade(alembic_config(conn), revision)
        return
    with _file_lock(url), engine.begin() as conn:
        command.upgrade(alembic_config(conn), revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Downgrade (tests and manual rollbacks)."""
    with get_engine(url).begin() as conn:
        command.downgrade(alembic_config(conn), revision)
