"""`aero backup FILE` and `aero restore FILE`: the store's snapshot and its way back
(backend/backup.py; docs/deploy.md "Backup and restore")."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

commands = typer.Typer()
console = Console()

URL_HELP = "SQLAlchemy URL of the store (default: DATABASE_URL, else <data>/aero.sqlite)."


def _url(database_url: str | None) -> str:
    from backend.settings import Settings
    from cli.errors import using_store

    return using_store(database_url or Settings().database_url, "--database-url")  # named in the messages of its errors


@commands.command("backup")
def backup_cmd(
    file: Annotated[str, typer.Argument(help="Where to write the snapshot (a SQLite file or a pg_dump archive).")],
    database_url: Annotated[Optional[str], typer.Option(help=URL_HELP)] = None,
):
    """Write one consistent snapshot of the store, while the API and workers keep writing."""
    from backend.backup import BackupError, backup

    try:
        snap = backup(_url(database_url), file)
    except BackupError as e:
        console.print(f"[red]backup failed:[/red] {e}")
        raise typer.Exit(1) from None
    console.print(f"backed up the {snap.kind} store to {snap.path} ({snap.bytes:,} bytes)")


@commands.command("restore")
def restore_cmd(
    file: Annotated[str, typer.Argument(help="A snapshot written by `aero backup`.")],
    database_url: Annotated[Optional[str], typer.Option(help=URL_HELP)] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Replace a store that holds runs.")] = False,
):
    """Replace the store with a snapshot. Stop the API, workers and reaper first.

    Works on a new machine: a SQLite store's data directory is created; a PostgreSQL
    DATABASE_URL names an empty database. A file that is not a whole snapshot, or one from a
    newer AERO Lab, is refused before anything changes."""
    from backend.backup import BackupError, SnapshotRefused, restore
    from backend.db.migrate import migrate

    url = _url(database_url)
    try:
        snap = restore(url, file, force=yes)
        migrate(url)  # a snapshot from an older release is brought to this release's schema
    except SnapshotRefused as e:
        console.print(f"[red]restore refused, nothing changed:[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(1) from None
    except BackupError as e:
        console.print(f"[red]restore failed:[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(1) from None
    console.print(f"restored the {snap.kind} store from {snap.path}")
