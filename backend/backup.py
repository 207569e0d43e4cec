"""Backup and restore of the store (`aero backup FILE`, `aero restore FILE`), for both stores.

A backup is one consistent snapshot, taken while the API and the workers keep writing:

- SQLite: the online backup API (``sqlite3.Connection.backup``) copies the database page by
  page and restarts when a writer changes a page it already copied, so the copy is the store
  as one transaction saw it; the write-ahead log is included. The file is a SQLite database.
- PostgreSQL: ``pg_dump --format=custom``, which reads everything in one repeatable-read
  transaction. The file is a pg_dump archive (``pg_restore`` reads it).

The file is written beside its destination and renamed into place, so a failed backup never
leaves a partial file under the name. A restore replaces the whole store with the snapshot
(schema and rows; the Alembic revision comes with it, and the next migration brings it to
head). Stop the API, the workers and the reaper first: a restore is not safe beside writers,
and the runs they hold would lose their owners. Restoring over a store that holds runs needs
``force`` (the CLI's ``--yes``). The two formats do not cross: a SQLite backup restores into
SQLite, a pg_dump archive into PostgreSQL.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

SQLITE_MAGIC = b"SQLite format 3\x00"
PGDUMP_MAGIC = b"PGDMP"


class BackupError(RuntimeError):
    """A backup or restore that cannot be done, with what to do about it."""


@dataclass(frozen=True)
class Snapshot:
    kind: str  # "sqlite" | "postgresql"
    path: Path
    bytes: int


def store_kind(url: str) -> str:
    backend = make_url(url).get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise BackupError(f"DATABASE_URL: backups cover SQLite and PostgreSQL stores; got {backend}")
    return backend


def file_kind(path: Path) -> str:
    """The store a backup file holds, from its first bytes."""
    with open(path, "rb") as f:
        head = f.read(16)
    if head.startswith(SQLITE_MAGIC):
        return "sqlite"
    if head.startswith(PGDUMP_MAGIC):
        return "postgresql"
    raise BackupError(f"{path}: not an AERO Lab backup (neither a SQLite database nor a pg_dump archive)")


def _sqlite_path(url: str) -> Path:
    database = make_url(url).database
    if not database or database == ":memory:":
        raise BackupError("DATABASE_URL: an in-memory SQLite store has nothing to back up")
    return Path(database)


def _libpq(url: str) -> tuple[str, dict[str, str]]:
    """The URL as libpq takes it (no SQLAlchemy driver), with the password in PGPASSWORD so it
    never shows in a process listing."""
    u = make_url(url)
    env = dict(os.environ)
    if u.password:
        env["PGPASSWORD"] = str(u.password)
    return u.set(drivername="postgresql", password=None).render_as_string(hide_password=False), env


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise BackupError(f"{name} is not installed: install the PostgreSQL client (Debian: postgresql-client), "
                          "the same major version as the server")
    return found


def _run(argv: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BackupError(f"{Path(argv[0]).name} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")


def _sqlite_copy(source_uri: str, target: str) -> None:
    """SQLite's online backup from ``source_uri`` (read-only URI) into the database ``target``."""
    with closing(sqlite3.connect(source_uri, uri=True)) as source, closing(sqlite3.connect(target)) as dest:
        source.backup(dest)


def backup(url: str, dest: str | Path) -> Snapshot:
    """Write a consistent snapshot of the store at ``url`` to ``dest`` (module docstring)."""
    kind, dest = store_kind(url), Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".partial")
    part.unlink(missing_ok=True)
    try:
        if kind == "sqlite":
            src = _sqlite_path(url)
            if not src.is_file():
                raise BackupError(f"DATABASE_URL: {src} does not exist")
            _sqlite_copy(f"file:{src}?mode=ro", str(part))
        else:
            conninfo, env = _libpq(url)
            _run([_tool("pg_dump"), "--format=custom", "--no-owner", "--no-privileges", f"--file={part}",
                  f"--dbname={conninfo}"], env)
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)
    return Snapshot(kind, dest, dest.stat().st_size)


def run_count(url: str) -> int:
    """Runs in the store at ``url`` (0 for a store without the table yet)."""
    engine = create_engine(url)
    try:
        if "runs" not in inspect(engine).get_table_names():
            return 0
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM runs")).scalar_one())
    finally:
        engine.dispose()


def restore(url: str, src: str | Path, force: bool = False) -> Snapshot:
    """Replace the store at ``url`` with the snapshot in ``src`` (module docstring). Refuses a
    store that holds runs unless ``force``."""
    kind, src = store_kind(url), Path(src)
    if not src.is_file():
        raise BackupError(f"{src}: no such backup file")
    held = file_kind(src)
    if held != kind:
        raise BackupError(f"{src} is a {held} backup and DATABASE_URL is a {kind} store: restore it into a {held} store")
    if not force and (n := run_count(url)):
        raise BackupError(f"the store holds {n} runs, which the restore would replace: pass --yes to replace them "
                          "(stop the API, workers and reaper first)")
    from backend.db.session import get_engine

    get_engine(url).dispose()  # this process's pooled connections must not outlive the old store
    if kind == "sqlite":
        target_path = _sqlite_path(url)
        target_path.parent.mkdir(parents=True, exist_ok=True)
        _sqlite_copy(f"file:{src}?mode=ro", str(target_path))  # every page of the target is replaced
    else:
        conninfo, env = _libpq(url)
        _run([_tool("pg_restore"), "--clean", "--if-exists", "--no-owner", "--no-privileges", "--single-transaction",
              f"--dbname={conninfo}", str(src)], env)
    return Snapshot(kind, src, src.stat().st_size)
