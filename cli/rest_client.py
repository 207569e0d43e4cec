"""The REST API client the command modules share: where the API is (``--api`` / AERO_API_URL,
default http://127.0.0.1:8000) and which token to send (``--token``, AERO_API_TOKEN or the
admin token file that ``aero up`` writes), one call that prints the API's error and exits,
and the table runs from the API print in. Kept apart from the commands so each command module
(submit_cmds, run_cmds, access_cmds, compare_cmds, rollout_cmds, platform_cmds' ``up --demo``)
imports the client without importing another module's commands."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Optional

import httpx
import typer
from rich.table import Table

from cli.common import safe
from cli.consoles import err
from cli.errors import report
from common.run_state import WAITING, state_of, waited_text

TOKEN_FILE = "admin.token"

# Help texts are Rich markup: "[env ...]" would be read as a style tag and vanish, so the
# environment variables and defaults go in parentheses.
ApiOpt = Annotated[Optional[str], typer.Option("--api", help="API base URL (env AERO_API_URL; default http://127.0.0.1:8000).")]
TokenOpt = Annotated[Optional[str], typer.Option("--token", help="API token (env AERO_API_TOKEN; default <data dir>/admin.token).")]


def token_path(settings=None) -> Path:
    from backend.settings import get_settings

    return (settings or get_settings()).data_path / TOKEN_FILE


def resolve_api(api: str | None) -> str:
    return (api or os.environ.get("AERO_API_URL") or "http://127.0.0.1:8000").rstrip("/")


def resolve_token(token: str | None) -> str | None:
    if token or os.environ.get("AERO_API_TOKEN"):
        return token or os.environ["AERO_API_TOKEN"]
    path = token_path()
    return path.read_text().strip() if path.exists() else None


def client(api: str | None, token: str | None, timeout: float = 30.0) -> httpx.Client:
    tok = resolve_token(token)
    headers = {"Authorization": f"Bearer {tok}"} if tok else {}
    return httpx.Client(base_url=resolve_api(api) + "/api", headers=headers, timeout=timeout)


def call(c: httpx.Client, method: str, path: str, **kw) -> Any:
    """One API call; on an error prints the API's answer (e.g. the 422 naming the field) and exits 1."""
    try:
        r = c.request(method, path, **kw)
    except httpx.HTTPError as e:
        report(e)  # what failed and what to do, as every command's error (cli/errors.py)
        raise typer.Exit(1) from None
    if r.status_code >= 400:
        try:
            detail = r.json().get("detail", r.text)
        except ValueError:
            detail = r.text
        err.print(f"[red]{method} {safe(path)} -> {r.status_code}[/]")
        for item in detail if isinstance(detail, list) else [detail]:
            if isinstance(item, dict):
                err.print(f"  [red]{safe('.'.join(str(x) for x in item.get('loc', [])))}[/]: {safe(item.get('msg'))}")
            else:
                err.print(f"  {safe(item)}")
        raise typer.Exit(1)
    return r.json() if r.content else None


def runs_table(runs: list[dict], title: str | None = None) -> Table:
    """One row per run. The status column shows the run's state (common/run_state.py): a running
    run that waits for its GPUs reads ``waiting`` and for how long, and a ``waits for`` column
    (only when some run waits) says for what."""
    t = Table(title=title)  # callers escape the title; every cell from the API is escaped here
    waits = any(state_of(r) == WAITING for r in runs)
    for col in ("id", "name", "method", "status", "progress", "step", "queue", "sweep", "owner", "tags") + (
            ("waits for",) if waits else ()):
        t.add_column(col, justify="right" if col in ("id", "progress", "step", "sweep") else "left")
    colors = {"succeeded": "green", "failed": "red", "running": "cyan", "cancelled": "yellow", "queued": "white",
              WAITING: "magenta"}
    for r in runs:
        st = state_of(r)
        waited = waited_text(r)
        status = f"[{colors.get(st, 'white')}]{safe(st)}[/]" + (f" {waited}" if waited else "")
        t.add_row(str(r["id"]), safe(r["name"]), safe(r["method"]), status,
                  f"{100 * r['progress']:.0f}%", f"{r['current_step']}/{r['total_steps']}", safe(r["queue"]),
                  str(r["sweep_id"] or ""), safe(r.get("owner") or ""), safe(",".join(r["tags"])),
                  *((safe(r.get("waiting_for") or "") if st == WAITING else "",) if waits else ()))
    return t


def csv_items(text: str | None) -> list[str]:
    """A comma-separated option value (run ids, methods, trackers, queues) as its items."""
    return [x.strip() for x in (text or "").split(",") if x.strip()]
