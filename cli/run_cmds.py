"""Commands on one stored run, over the REST API: ``aero resume``, ``aero clone``, ``aero note``,
``aero alerts`` and ``aero export`` (a run's config, steps and evals into TensorBoard or MLflow)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from cli.common import parse_sets, safe
from cli.consoles import err, out
from cli.rest_client import ApiOpt, TokenOpt, call, client, runs_table
from common.dotted import flatten, set_path

commands = typer.Typer()
RunArg = Annotated[int, typer.Argument(help="Run id.", min=1)]


@commands.command()
def resume(run: RunArg, api: ApiOpt = None, token: TokenOpt = None):
    """Queue a failed or cancelled run again: it resumes from its last checkpoint."""
    with client(api, token) as c:
        r = call(c, "POST", f"/runs/{run}/resume")
    out.print(runs_table([r], f"run {run} queued again; it resumes from its last checkpoint"))


def cloned(config: dict[str, Any], sets: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the ``--set`` overrides applied (dotted keys, deep). A ``--set task=...``
    that changes the task drops the old task's section (the code task's ``code`` block), unless
    the overrides set it too."""
    from trainer.tasks.registry import retasked

    new: dict[str, Any] = {}
    for key, value in {**flatten(config), **flatten(sets)}.items():
        set_path(new, key, value)
    return retasked(new, config.get("task"), kept=(k.split(".", 1)[0] for k in sets))


@commands.command()
def clone(
    run: RunArg,
    sets: Annotated[Optional[list[str]], typer.Option("--set", help="Change key=value of the copy (steps=100). Repeatable.")] = None,
    name: Annotated[Optional[str], typer.Option(help="Name of the new run (default: <method>-seed<seed>).")] = None,
    tag: Annotated[Optional[list[str]], typer.Option("--tag", help="Tags of the new run (default: the run's). Repeatable.")] = None,
    api: ApiOpt = None,
    token: TokenOpt = None,
):
    """Submit a new run with a run's config (and tags), changed by --set."""
    with client(api, token) as c:
        src = call(c, "GET", f"/runs/{run}")
        config = cloned(src["config"], parse_sets(sets))
        config.pop("name", None) if name is None else None
        body = {"config": config, "tags": tag if tag is not None else src["tags"], **({"name": name} if name else {})}
        created = call(c, "POST", "/runs", json=body)
    out.print(runs_table([created], f"cloned run {run}"))


@commands.command()
def note(
    run: RunArg,
    notes: Annotated[Optional[str], typer.Option("--notes", help="Replace the run's notes.")] = None,
    tags: Annotated[Optional[str], typer.Option("--tags", help="Replace the run's tags (comma-separated; '' clears).")] = None,
    add_tag: Annotated[Optional[list[str]], typer.Option("--add-tag", help="Add a tag. Repeatable.")] = None,
    api: ApiOpt = None,
    token: TokenOpt = None,
):
    """Edit a run's notes and tags."""
    with client(api, token) as c:
        body: dict[str, Any] = {}
        if notes is not None:
            body["notes"] = notes
        if tags is not None or add_tag:
            current = [t.strip() for t in tags.split(",") if t.strip()] if tags is not None else \
                call(c, "GET", f"/runs/{run}")["tags"]
            body["tags"] = list(dict.fromkeys([*current, *(add_tag or [])]))
        if not body:
            err.print("nothing to change: give --notes, --tags or --add-tag")
            raise typer.Exit(2)
        r = call(c, "PATCH", f"/runs/{run}", json=body)
    out.print(runs_table([r]))
    if r["notes"]:
        out.print(f"notes: {safe(r['notes'])}")


@commands.command()
def alerts(run: RunArg, api: ApiOpt = None, token: TokenOpt = None):
    """A run's alert rules and the ones that fired."""
    with client(api, token) as c:
        a = call(c, "GET", f"/runs/{run}/alerts")
    t = Table(title=f"run {run}: {len(a['rules'])} rule(s), webhook {'on' if a['webhook'] else 'off'}")
    for col in ("rule", "kind", "step", "value", "stopped", "message", "delivery"):
        t.add_column(col)
    for e in a["events"]:
        t.add_row(str(e["rule"]), safe(e["kind"]), str(e["step"]), "" if e["value"] is None else f"{e['value']:.4g}",
                  "yes" if e["stopped"] else "", safe(e["message"]), safe(e["delivery"]))
    out.print(t)
    if a["stop_reason"]:
        out.print(f"[yellow]stopped early[/]: {safe(a['stop_reason'])}")


def steps_from_csv(text: str) -> list[dict[str, Any]]:
    """The export route's CSV -> ``[{"step": s, key: value, ...}]`` (empty cells dropped)."""
    rows = []
    for rec in csv.DictReader(io.StringIO(text)):
        step = int(rec.pop("step"))
        rows.append({"step": step, **{k: float(v) for k, v in rec.items() if v not in ("", None)}})
    return rows


def evals_by_step(rows: list[dict[str, Any]]) -> dict[int, dict[str, dict[str, Any]]]:
    out_: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        out_.setdefault(int(r["step"]), {})[r["benchmark"]] = {"avg_at_k": r.get("avg_at_k"), "pass_at_k": r.get("pass_at_k")}
    return out_


@commands.command()
def export(
    run: RunArg,
    to: Annotated[str, typer.Option("--to", help="tensorboard | mlflow (needs the trackers extra of aero-lab).")] = "tensorboard",
    out_dir: Annotated[Path, typer.Option("--out", help="Directory to write (TensorBoard event files, or MLflow's "
                                                        "SQLite store mlflow.db).")] = Path("aero-export"),
    api: ApiOpt = None,
    token: TokenOpt = None,
):
    """Write a stored run (config, every step, every evaluation) where TensorBoard or MLflow opens it."""
    from trainer.platform.trackers import export_run

    if to not in ("tensorboard", "mlflow"):
        raise typer.BadParameter("--to is tensorboard or mlflow")
    with client(api, token, timeout=120) as c:
        r = call(c, "GET", f"/runs/{run}")
        try:
            resp = c.get(f"/runs/{run}/export", params={"format": "csv"})
            resp.raise_for_status()
        except Exception as e:  # noqa: BLE001  (printed for the user, like call())
            err.print(f"[red]could not read run {run}'s metrics[/]: {safe(e)}")
            raise typer.Exit(1) from None
        evals = call(c, "GET", f"/runs/{run}/evals", params={"per_problem": "false"})
    steps = steps_from_csv(resp.text)
    where = export_run(to, out_dir, f"{run}-{r['name']}", r["config"], steps, evals_by_step(evals["data"]))
    how = f"tensorboard --logdir {where}" if to == "tensorboard" else f"mlflow ui --backend-store-uri sqlite:///{where.resolve()}"
    out.print(f"run {run}: {len(steps)} steps, {len(evals['data'])} eval rows -> {safe(where)}\nopen it: {safe(how)}",
              soft_wrap=True)  # a command to copy: never cut
