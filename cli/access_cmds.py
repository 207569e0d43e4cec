"""``aero audit``: the audit log, read through the API with an admin token."""

from __future__ import annotations

import json
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from cli.common import safe
from cli.consoles import out
from cli.rest_client import ApiOpt, TokenOpt, call, client

commands = typer.Typer()


def _state(value: Any) -> str:
    return "" if value is None else json.dumps(value, sort_keys=True, default=str)


def audit_table(events: list[dict], title: str) -> Table:
    t = Table(title=title)  # every cell from the API is escaped
    for col in ("id", "at (UTC)", "user", "role", "action", "target", "before", "after"):
        t.add_column(col, justify="right" if col == "id" else "left", overflow="fold")
    for e in events:
        t.add_row(str(e["id"]), safe(str(e["at"])[:19]), safe(e["user"] or "(operator)"), safe(e["role"] or ""),
                  safe(e["action"]), safe(e["target"] or ""), safe(_state(e["before"])), safe(_state(e["after"])))
    return t


@commands.command("audit")
def audit_cmd(
    user: Annotated[Optional[str], typer.Option("--user", help="Only changes made by this user.")] = None,
    action: Annotated[Optional[list[str]], typer.Option("--action", "-a", help="run.create|run.patch|run.cancel|run.delete|"
                                                         "sweep.create|sweep.delete|token.create|token.revoke|quota.refuse; repeatable.")] = None,
    target: Annotated[Optional[str], typer.Option("--target", help="Only changes of this object, e.g. run:12.")] = None,
    limit: Annotated[int, typer.Option(help="Newest N events.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print the events as JSON lines.")] = False,
    api: ApiOpt = None,
    token: TokenOpt = None,
):
    """Who changed what and when (newest first), with the state before and after; needs an admin token."""
    params: dict[str, Any] = {"limit": limit}
    for key, val in (("user", user), ("action", action), ("target", target)):
        if val:
            params[key] = val
    with client(api, token) as c:
        page = call(c, "GET", "/audit", params=params)
    if as_json:
        for e in page["data"]:
            print(json.dumps(e, sort_keys=True))
        return
    out.print(audit_table(page["data"], f"{len(page['data'])} of {page['count']} event(s)"))
