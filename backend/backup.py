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

A restore works on a new machine: on SQLite it creates the data directory (0700) and the store
file (0600); on PostgreSQL it restores into the empty database that the URL names (created
beforehand, e.g. ``createdb``). Before it changes anything it reads the whole snapshot and
refuses (:class:`SnapshotRefused`, one line saying why) a file that is not a snapshot, one that
is truncated or damaged, one without AERO Lab's schema, and one from a newer release (an
Alembic revision this code does not know, which no migration here could bring to head).
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
from sqlalchemy.exc import OperationalError

SQLITE_MAGIC = b"SQLite format 3\x00"
PGDUMP_MAGIC = b"PGDMP"


class BackupError(RuntimeError):
    """A backup or restore that cannot be done, with what to do about it."""


class SnapshotRefused(BackupError):
    """A restore refused before it changed anything (a bad snapshot, the wrong store, runs held)."""


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
    if not head:
        raise SnapshotRefused(f"{path}: not an AERO Lab backup (an empty file)")
    raise SnapshotRefused(f"{path}: not an AERO Lab backup (neither a SQLite database nor a pg_dump archive)")


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


def _snapshot_uri(path: Path) -> str:
    """A read-only URI for a snapshot file: ``immutable`` (nobody writes a snapshot), so SQLite
    neither locks it nor creates -wal/-shm files beside it (a read-only medium is fine)."""
    return Path(path).resolve().as_uri() + "?immutable=1"


def _known_revisions() -> tuple[set[str], str]:
    """The Alembic revisions this code knows, and its head."""
    from alembic.script import ScriptDirectory

    from backend.db.migrate import alembic_config

    script = ScriptDirectory.from_config(alembic_config())
    return {s.revision for s in script.walk_revisions()}, ", ".join(script.get_heads())


def _check_revisions(src: Path, revisions: list[str]) -> None:
    if not revisions:
        raise SnapshotRefused(f"{src}: not an AERO Lab backup (no schema revision in its alembic_version table)")
    known, head = _known_revisions()
    if unknown := [r for r in revisions if r not in known]:
        raise SnapshotRefused(f"{src} is from a newer AERO Lab (schema revision {', '.join(unknown)}; this release "
                              f"knows up to {head}): upgrade AERO Lab here first, then restore")


def _check_sqlite_snapshot(src: Path) -> None:
    """Refuse a truncated or damaged SQLite snapshot, or one that is not an AERO Lab store of a
    schema this code knows."""
    size = src.stat().st_size
    with open(src, "rb") as f:
        header = f.read(100)
    if len(header) < 100:
        raise SnapshotRefused(f"{src} is truncated: {size} bytes, shorter than a SQLite header")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if header[24:28] == header[92:96] and pages and size < page_size * pages:  # the header's page count is valid
        raise SnapshotRefused(f"{src} is truncated: {size:,} of its {page_size * pages:,} bytes")
    try:
        with closing(sqlite3.connect(_snapshot_uri(src), uri=True)) as conn:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise SnapshotRefused(f"{src} is damaged: {problems[0]}")
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "alembic_version" not in tables or "runs" not in tables:
                raise SnapshotRefused(f"{src}: a SQLite database, but not an AERO Lab backup (no runs or "
                                      "alembic_version table)")
            revisions = [row[0] for row in conn.execute("SELECT version_num FROM alembic_version")]
    except sqlite3.DatabaseError as e:
        raise SnapshotRefused(f"{src} is damaged or truncated: {e}") from None
    _check_revisions(src, revisions)


def _check_pgdump_snapshot(src: Path) -> None:
    """Read the whole archive (a truncated one fails here, not halfway through a restore) and
    refuse one that is not an AERO Lab store of a schema this code knows."""
    pg_restore = _tool("pg_restore")
    proc = subprocess.run([pg_restore, "--file=/dev/null", str(src)], capture_output=True, text=True)
    if proc.returncode != 0:
        why = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        raise SnapshotRefused(f"{src} is truncated or damaged (pg_restore cannot read it to its end): {why[0]}")
    proc = subprocess.run([pg_restore, "--data-only", "--table=alembic_version", "--file=-", str(src)],
                          capture_output=True, text=True)
    lines = proc.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("COPY ") and ".alembic_version " in line), None)
    if proc.returncode != 0 or start is None:
        raise SnapshotRefused(f"{src}: a pg_dump archive, but not an AERO Lab backup (no alembic_version table)")
    revisions = []
    for line in lines[start + 1:]:
        if line == "\\.":
            break
        revisions.append(line.strip())
    _check_revisions(src, revisions)


def check_snapshot(src: str | Path) -> str:
    """The store kind a snapshot holds, after reading all of it; :class:`SnapshotRefused` if it is
    not a whole snapshot of an AERO Lab store whose schema this code knows."""
    src = Path(src)
    if not src.is_file():
        raise SnapshotRefused(f"{src}: no such backup file")
    kind = file_kind(src)
    if kind == "sqlite":
        _check_sqlite_snapshot(src)
    else:
        _check_pgdump_snapshot(src)
    return kind


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


def _shown(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def run_count(url: str) -> int:
    """Runs in the store at ``url`` (0 for a store without the table yet, or a SQLite file that
    does not exist yet: which this does not create)."""
    if store_kind(url) == "sqlite" and not _sqlite_path(url).exists():
        return 0
    engine = create_engine(url)
    try:
        if "runs" not in inspect(engine).get_table_names():
            return 0
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM runs")).scalar_one())
    except OperationalError as e:
        why = str(e.orig).strip().splitlines()[0] if e.orig is not None else str(e)
        hint = " (create the empty database first: createdb NAME)" if "does not exist" in why else ""
        raise SnapshotRefused(f"cannot open the store at {_shown(url)}: {why}{hint}") from None
    finally:
        engine.dispose()


def restore(url: str, src: str | Path, force: bool = False) -> Snapshot:
    """Replace the store at ``url`` with the snapshot in ``src`` (module docstring). Refuses
    (:class:`SnapshotRefused`, nothing changed) a bad snapshot, one of the other store kind, and a
    store that holds runs unless ``force``. On SQLite the data directory is created if missing."""
    kind, src = store_kind(url), Path(src)
    held = check_snapshot(src)
    if held != kind:
        raise SnapshotRefused(f"{src} is a {held} backup and DATABASE_URL is a {kind} store: restore it into a "
                              f"{held} store")
    if not force and (n := run_count(url)):
        raise SnapshotRefused(f"the store holds {n} runs, which the restore would replace: pass --yes to replace "
                              "them (stop the API, workers and reaper first)")
    from backend.db.session import get_engine

    get_engine(url).dispose()  # this process's pooled connections must not outlive the old store
    if kind == "sqlite":
        from backend.settings import private_file

        target_path = _sqlite_path(url)
        if not target_path.parent.exists():  # a new machine: the data directory, 0700
            target_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        private_file(target_path, create=True)  # 0600 (and its journals, which take the file's mode)
        _sqlite_copy(_snapshot_uri(src), str(target_path))  # every page of the target is replaced
    else:
        conninfo, env = _libpq(url)
        _run([_tool("pg_restore"), "--clean", "--if-exists", "--no-owner", "--no-privileges", "--single-transaction",
              f"--dbname={conninfo}", str(src)], env)
    return Snapshot(kind, src, src.stat().st_size)
