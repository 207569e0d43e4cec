"""``aero submit`` and ``aero runs``: thin clients of the REST API (cli/rest_client.py) that
submit a run or a methods x seeds sweep, and list runs as a table. The request bodies are
built here (``submission``, ``alert_and_tracker_sets``) so tests check them without an API."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from cli.common import parse_sets, safe
from cli.consoles import out
from cli.rest_client import ApiOpt, TokenOpt, call, client, csv_items, runs_table
from trainer.methods.spec import method_names

# cli/main.py merges these into the `aero` app; this module never imports it.
commands = typer.Typer()


def submission(methods: list[str], seeds: list[int], sets: dict, name: str | None, tags: list[str],
               priority: int = 0) -> tuple[str, dict]:
    """(path, body): one run -> POST /runs; several methods or seeds -> POST /sweeps (a grid).
    ``priority`` (0 = the API's default, left out) goes to the run, or to every run of the sweep."""
    extra: dict[str, Any] = {"priority": priority} if priority else {}
    if len(methods) == 1 and len(seeds) <= 1:
        config = {**sets, "method": methods[0], **({"seed": seeds[0]} if seeds else {})}
        return "/runs", {"config": config, "tags": tags, **({"name": name} if name else {}), **extra}
    body: dict[str, Any] = {"base": sets, "methods": methods, "tags": tags, **extra}
    if seeds:
        body["seeds"] = seeds
    if name:
        body["name"] = name
    return "/sweeps", body


def alert_and_tracker_sets(alerts: list[str] | None, webhook: str | None, trackers: list[str] | None) -> dict:
    """``--alert`` / ``--webhook`` / ``--tracker`` as config fields (common/alert_rules.py)."""
    from common.alert_rules import parse_rule

    out: dict[str, Any] = {}
    if alerts or webhook:
        out["alerts"] = {"rules": [parse_rule(a) for a in alerts or []], **({"webhook_url": webhook} if webhook else {})}
    if trackers:
        out["trackers"] = [t for item in trackers for t in csv_items(item)]
    return out


@commands.command()
def submit(
    method: Annotated[list[str], typer.Option("--method", "-m", help=f"{'|'.join(method_names())}; repeat or comma-separate for a sweep.")] = ["aero"],  # noqa: B006
    seeds: Annotated[Optional[str], typer.Option("--seeds", help="Comma-separated seeds, e.g. 0,1,2.")] = None,
    sets: Annotated[Optional[list[str]], typer.Option("--set", help="Config override key=value (aero.k=2, steps=100). Repeatable.")] = None,
    name: Annotated[Optional[str], typer.Option(help="Run name (one run) or sweep name (several).")] = None,
    tag: Annotated[Optional[list[str]], typer.Option("--tag", help="Tag; repeatable.")] = None,
    alert: Annotated[Optional[list[str]], typer.Option("--alert", help="Alert rule KIND=VALUE@BENCHMARK:ACTION (all but KIND optional), e.g. "
                                                       "grad_norm_above=50:stop, eval_target=0.6:stop, no_improvement=3:stop, "
                                                       "nan_loss:notify_stop, failed. Repeatable.")] = None,
    webhook: Annotated[Optional[str], typer.Option("--webhook", help="URL the alerts are POSTed to (its host must be in the "
                                                   "operator's AERO_WEBHOOK_HOSTS).")] = None,
    tracker: Annotated[Optional[list[str]], typer.Option("--tracker", help="wandb | mlflow | tensorboard; repeatable.")] = None,
    priority: Annotated[int, typer.Option("--priority", min=0, max=10, help=(
        "0-10: the workers claim a queue's higher-priority runs first, before the fair share. The operator caps it per "
        "role (a member: 5 by default; `GET /api/me` says yours); above it the API refuses the submission."))] = 0,
    api: ApiOpt = None,
    token: TokenOpt = None,
):
    """Submit runs over the REST API: one run, or a methods x seeds sweep."""
    methods = [m for item in method for m in csv_items(item)]
    seed_list = [int(s) for s in csv_items(seeds)]
    sets_ = parse_sets(sets)
    try:
        sets_.update(alert_and_tracker_sets(alert, webhook, tracker))
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--alert") from None
    path, body = submission(methods, seed_list, sets_, name, tag or [], priority)
    with client(api, token) as c:
        created = call(c, "POST", path, json=body)
    runs = [created] if path == "/runs" else created["runs"]
    title = f"sweep {created['id']} ({safe(created['name'])})" if path == "/sweeps" else None
    out.print(runs_table(runs, title))


@commands.command("runs")
def list_runs_cmd(
    status: Annotated[Optional[list[str]], typer.Option("--status", "-s", help=(
        "queued|waiting|running|succeeded|failed|cancelled; repeatable. waiting: running runs that wait for their "
        "GPUs; running lists those too."))] = None,
    method: Annotated[Optional[list[str]], typer.Option("--method", "-m")] = None,
    tag: Annotated[Optional[str], typer.Option("--tag")] = None,
    sweep: Annotated[Optional[int], typer.Option("--sweep", help="Sweep id.")] = None,
    owner: Annotated[Optional[str], typer.Option("--owner", help="Only runs of this user.")] = None,
    mine: Annotated[bool, typer.Option("--mine", help="Only the runs of the token's own user.")] = False,
    limit: Annotated[int, typer.Option(help="Newest N runs.")] = 50,
    api: ApiOpt = None,
    token: TokenOpt = None,
):
    """List runs (newest first) as a table.

    A run waiting for its GPUs shows as waiting, for how long and for what."""
    params: dict[str, Any] = {"limit": limit}
    for key, val in (("status", status), ("method", method), ("tag", tag), ("sweep_id", sweep), ("owner", owner)):
        if val:
            params[key] = val
    with client(api, token) as c:
        if mine:
            params["owner"] = call(c, "GET", "/me")["user"]
        page = call(c, "GET", "/runs", params=params)
    out.print(runs_table(page["data"], f"{len(page['data'])} of {page['count']} run(s)"))
