"""``aero rollouts RUN --step N``: one step's stored rollout sample, from the REST API.

Model text is hostile input: every line passes through ``cli.common.safe`` (control and bidi
characters shown as escapes, Rich markup escaped), so a response cannot rewrite the terminal.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from rich.panel import Panel
from rich.table import Table

from cli.common import safe
from cli.consoles import out
from cli.rest_client import ApiOpt, TokenOpt, call, client

commands = typer.Typer()


def safe_lines(text: str) -> str:
    """Multi-line model text for a Rich string: each line made safe on its own (newlines kept)."""
    return "\n".join(safe(line) for line in (text or "").split("\n"))


def num(value, fmt: str = ".3g") -> str:
    return "-" if value is None else format(value, fmt)


def summary_table(rows: list[dict]) -> Table:
    t = Table()
    for col in ("#", "group", "stage", "stratum", "version", "reward", "advantage", "length", "truncated"):
        t.add_column(col, justify="right" if col in ("#", "group", "version", "reward", "advantage", "length") else "left",
                     no_wrap=col in ("stage", "stratum"))  # "rescue 1" on one line, even at 80 columns
    for i, r in enumerate(rows):
        version = r.get("version")  # absent from rows stored before it was recorded
        t.add_row(str(i + 1), str(r["group"]), safe(r["stage"]), safe(r["stratum"]), "-" if version is None else str(int(version)),
                  num(r["reward"]), num(r["advantage"], "+.3f"), str(r["length"]), "yes" if r["truncated"] else "")
    return t


@commands.command("rollouts")
def rollouts_cmd(
    run: Annotated[int, typer.Argument(help="Run id.")],
    step: Annotated[Optional[int], typer.Option("--step", "-n", help="Step (default: the last step with a stored sample).")] = None,
    stratum: Annotated[Optional[str], typer.Option(help="rescue|low|high.")] = None,
    stage: Annotated[Optional[str], typer.Option(help="explore|rescue|round|'curated out'.")] = None,
    min_reward: Annotated[Optional[float], typer.Option(help="Only rewards >= this.")] = None,
    max_reward: Annotated[Optional[float], typer.Option(help="Only rewards <= this.")] = None,
    limit: Annotated[int, typer.Option(help="Rollouts per page (at most 500).")] = 20,
    offset: Annotated[int, typer.Option(help="Skip this many matching rollouts.")] = 0,
    text: Annotated[bool, typer.Option("--text/--no-text", help="Print each prompt and response.")] = True,
    api: ApiOpt = None,
    token: TokenOpt = None,
):
    """Show one step's stored rollouts: reward, advantage, stratum, round, length, and the text."""
    params: dict[str, Any] = {k: v for k, v in (("step", step), ("stratum", stratum), ("stage", stage),
                                                ("min_reward", min_reward), ("max_reward", max_reward)) if v is not None}
    with client(api, token) as c:
        body = call(c, "GET", f"/runs/{run}/rollouts", params={**params, "limit": limit, "offset": offset})
    if not body["steps"]:
        out.print(f"run {run} has no stored rollouts yet")
        return
    rows = body["data"]
    out.print(f"run {run}, step {body['step']}: {body['count']} matching rollout(s), showing {len(rows)} "
              f"(steps with samples: {body['steps'][0]}..{body['steps'][-1]})")
    if rows:
        out.print(summary_table(rows))
    for i, r in enumerate(rows if text else []):
        clipped = " (clipped)" if r["clipped"] else ""
        body_text = f"[bold]prompt{clipped}[/]\n{safe_lines(r['prompt'])}\n[bold]response[/]\n{safe_lines(r['response'])}"
        out.print(Panel(body_text, title=f"#{i + 1} group {r['group']} - {safe(r['stage'])} - reward {num(r['reward'])}",
                        title_align="left"))
