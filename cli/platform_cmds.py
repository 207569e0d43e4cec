"""The platform's processes: ``aero up``, ``aero worker`` and ``aero reaper``.

``aero up`` is the embedded default: one command starts the API (uvicorn), one Celery worker,
the reaper and the dashboard as child processes (cli/supervisor.py restarts one that dies), on
a SQLite store and a serverless SQLite broker under the data directory (DATABASE_URL /
REDIS_URL override both), and writes the admin token file the other commands' REST client
(cli/rest_client.py) picks up. ``worker`` and ``reaper`` run one of those processes in the
foreground, for a platform spread over several machines.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from cli.common import safe
from cli.consoles import err, out
from cli.errors import check_broker, check_port, check_store
from cli.rest_client import call, client, csv_items, runs_table, token_path
from cli.supervisor import ROOT, Child, Supervisor, shutdown, tail, wait_healthy

DEMO_METHODS = ("grpo", "dapo", "aero")

# cli/main.py merges these into the `aero` app; this module never imports it.
commands = typer.Typer()


# ---------------------------------------------------------------- worker / reaper


def worker_argv(queues: list[str], concurrency: int, embedded: bool, hostname: str = "aero@%h") -> list[str]:
    argv = [sys.executable, "-m", "celery", "-A", "worker.celery_app", "worker", "-Q", ",".join(queues),
            "--concurrency", str(concurrency), "--loglevel", "INFO", "--hostname", hostname]
    if embedded:
        # The SQLAlchemy transport has no fanout exchange: skip the broadcast features.
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    return argv


@commands.command()
def worker(
    queues: Annotated[Optional[str], typer.Option("--queues", "-Q", help="Comma-separated queues (env AERO_WORKER_QUEUES; "
                                                  "default cpu, plus gpu with CUDA).")] = None,
    concurrency: Annotated[Optional[int], typer.Option("--concurrency", "-c", help="Runs at once (env AERO_WORKER_CONCURRENCY; default 1).")] = None,
    gpus: Annotated[Optional[str], typer.Option("--gpus", help="GPU ids this worker owns, e.g. 0,1,2,3 (env "
                                                "AERO_WORKER_GPUS): it starts a Ray head of its own with exactly these, "
                                                "and Ray places each run's GPUs on them (no two runs share one; a run that "
                                                "does not fit waits). On a host without CUDA they are logical GPUs. "
                                                "docs/scale.md")] = None,
    # envvar: a worker given the cluster only in its environment (an older sbatch, a container's env)
    # must join it too, never start a Ray head of its own over the GPUs it sees
    ray_address: Annotated[Optional[str], typer.Option("--ray-address", envvar="AERO_RAY_ADDRESS",
                                                       help="Join this Ray cluster (host:port) and place every GPU run "
                                                       "on it, verl runs of several nodes included. docs/scale.md")] = None,
):
    """Start a Celery worker in the foreground ('aero up' starts one for you)."""
    from backend.settings import broker_url, get_settings
    from worker.celery_app import default_queues, is_embedded
    from worker.ray_head import OWNED_ENV, owned_gpus, parse_gpus, ray_installed, run_with_head, visible_gpus
    from worker.settings import WorkerSettings

    settings, ws = get_settings(), WorkerSettings()
    qs = csv_items(queues) or default_queues(settings, ws)
    argv = worker_argv(qs, concurrency or ws.concurrency, is_embedded(broker_url(settings)))
    try:
        owned = parse_gpus(gpus if gpus is not None else os.environ.get("AERO_WORKER_GPUS"))
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--gpus") from None
    if owned and ray_address:
        raise typer.BadParameter("give either --gpus (a Ray head of the worker's own) or --ray-address (the "
                                 "operator's cluster), not both", param_hint="--gpus")
    os.chdir(ROOT)
    # Celery would start without the store and retry an unreachable broker for ever: fail now instead
    check_store(settings.database_url)
    if not is_embedded(broker_url(settings)):
        check_broker(broker_url(settings))
    visible = [] if owned or ray_address else visible_gpus()
    if visible and ray_installed():
        # no phantom GPUs: without a cluster the worker's runs share one Ray that declares only the
        # GPUs this host shows it (a Ray per run would declare whatever each run asks for)
        owned = owned_gpus(None, None, visible)
    if owned:
        raise typer.Exit(run_with_head(argv, owned))
    if ray_address:
        os.environ["AERO_RAY_ADDRESS"] = ray_address
    elif not visible:  # no GPU and no cluster: what the claim check counts (worker/ray_head.py gpu_claim_issue)
        os.environ[OWNED_ENV] = "0"
    os.execv(argv[0], argv)


@commands.command()
def reaper(interval: Annotated[Optional[float], typer.Option(help="Seconds between sweeps (env AERO_REAPER_INTERVAL_S; default 10).")] = None):
    """Re-queue or fail runs whose worker vanished ('aero up' starts one for you)."""
    from backend.settings import get_settings
    from worker.reaper import main

    check_store(get_settings().database_url)  # its loop would log the same error every sweep, for ever
    main([] if interval is None else ["--interval", str(interval)])


# ---------------------------------------------------------------- aero up


def ensure_admin_token(settings) -> tuple[str, bool]:
    """The local admin token from <data dir>/admin.token, created (and the file written, mode 0600)
    on first start or when the stored one no longer verifies (e.g. a fresh database)."""
    from backend.db.session import session_scope
    from backend.db.tokens import create_token, verify_token

    path = token_path(settings)
    with session_scope(settings.database_url) as s:
        if path.exists() and verify_token(s, path.read_text().strip()) is not None:
            return path.read_text().strip(), False
    with session_scope(settings.database_url) as s:
        _, tok = create_token(s, "admin (aero up)")
    from backend.settings import private_dir, private_file

    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    private_file(path)  # an older token file (O_CREAT keeps an existing file's mode)
    with os.fdopen(fd, "w") as f:
        f.write(tok + "\n")
    return tok, True


def print_banner(console: Console, api_url: str, dash_url: str | None, token: str, token_file: Path | None, log_dir: Path) -> None:
    """What `aero up` serves and the admin token. Each line is printed unwrapped (soft wrap),
    also when stdout is a file or a pipe, where Rich would otherwise break lines at 80 columns
    and split the token; markup and highlighting are off for the values (paths may hold '[')."""
    console.print("[bold green]AERO Lab is up[/]")
    rows = [("API", f"{api_url}/api   (docs {api_url}/docs)"), ("dashboard", dash_url),
            ("token", token + (f"   (new; saved in {token_file})" if token_file else "")), ("logs", str(log_dir))]
    for label, value in rows:
        if value:
            console.print(f"  {label:<10} {value}", soft_wrap=True, markup=False, highlight=False)
    console.print("Ctrl-C to stop.")


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches (127.0.0.0/8, ::1, "localhost")."""
    if host.strip().lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: may resolve to anything


DASHBOARD_ASKS = ("dashboard listens on {host}, not on a loopback address: it does not get the admin token and "
                  "asks each user for an API token (Settings in its sidebar; `aero token create NAME` makes one)")


def dashboard_env(host: str, api_url: str, token: str, base: dict[str, str] | None = None) -> tuple[dict[str, str], str | None]:
    """(environment, note) for the dashboard child. On a loopback address it gets the admin token
    (the one-command convenience of `aero up`); bound to any other address (``--host 0.0.0.0``)
    anyone who reaches it would act as admin, so it gets no token, an empty AERO_API_TOKEN over
    any inherited one, and AERO_DASHBOARD_ASK_TOKEN=1 (it neither reads <data dir>/admin.token
    nor uses a token it was not given by the user); ``note`` says so."""
    env = {**(base or {}), "AERO_API_URL": api_url}
    if is_loopback(host):
        return {**env, "AERO_API_TOKEN": token, "AERO_DASHBOARD_ASK_TOKEN": ""}, None
    return {**env, "AERO_API_TOKEN": "", "AERO_DASHBOARD_ASK_TOKEN": "1"}, DASHBOARD_ASKS.format(host=host)


def demo_sweep(steps: int = 60) -> dict:
    """GRPO vs DAPO vs AERO on the tiny preset's defaults, one seed (evaluated every 5 steps and
    at step 0, so Compare can show accuracy against compute and the compute to reach GRPO's)."""
    return {"name": "demo", "methods": list(DEMO_METHODS), "seeds": [0], "tags": ["demo"],
            "base": {"preset": "tiny", "steps": steps, "checkpoint_every": 10}}


@commands.command()
def up(
    demo: Annotated[bool, typer.Option("--demo", help="Also submit a GRPO/DAPO/AERO sweep on the tiny preset.")] = False,
    host: Annotated[str, typer.Option(help="Interface the API and dashboard listen on.")] = "127.0.0.1",
    api_port: Annotated[int, typer.Option(help="API port.")] = 8000,
    dashboard_port: Annotated[int, typer.Option(help="Dashboard port.")] = 8501,
    no_dashboard: Annotated[bool, typer.Option("--no-dashboard", help="Do not start the dashboard.")] = False,
    demo_steps: Annotated[int, typer.Option(help="Steps per demo run (60: ~5 min for the three runs on 2 CPU cores).")] = 60,
):
    """Start the platform on this machine: API, one worker, the reaper and the dashboard.

    Embedded by default (SQLite store and SQLite broker under AERO_DATA_DIR); DATABASE_URL and
    REDIS_URL switch to PostgreSQL and Redis. Ctrl-C stops everything; a run that was training
    resumes from its last checkpoint on the next start.
    """
    from backend.db.migrate import migrate
    from backend.settings import broker_url, ensure_data_dir, get_settings
    from worker.celery_app import default_queues, is_embedded
    from worker.settings import WorkerSettings

    dash = ROOT / "dashboard" / "app.py"
    check_port(host, api_port, "--api-port")  # before anything starts: a child would fail after seconds, noisily
    if not no_dashboard and dash.exists():
        check_port(host, dashboard_port, "--dashboard-port")
    settings, ws = get_settings(), WorkerSettings()
    data = ensure_data_dir(settings)  # 0700; the store, broker and token files in it 0600
    broker = broker_url(settings)
    embedded = is_embedded(broker)
    if not embedded:
        check_broker(broker)
    err.print(f"data dir  {safe(data)}")
    err.print(f"store     {safe('SQLite ' + settings.database_url) if settings.database_url.startswith('sqlite') else 'DATABASE_URL'}")
    err.print(f"broker    {safe('embedded SQLite (' + broker + ')') if embedded else 'REDIS_URL'}")
    migrate(settings.database_url)
    token, created = ensure_admin_token(settings)

    # Children see the same (absolute) data dir whatever their working directory.
    env = {"AERO_DATA_DIR": str(data), "AERO_MIGRATE_ON_START": "false", "PYTHONUNBUFFERED": "1"}
    show_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    api_url = f"http://{show_host}:{api_port}"
    sup = Supervisor(data / "logs")
    stopping = {"sig": None}

    def on_signal(sig, _frame):
        stopping["sig"] = sig

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    code = 0
    try:
        sup.start(Child("api", [sys.executable, "-m", "uvicorn", "backend.main:app", "--host", host, "--port", str(api_port)], env=env))
        # SIGQUIT = Celery's cold shutdown: it hands the unfinished run's message back to the
        # broker at once (a warm shutdown would wait for the whole run to finish).
        sup.start(Child("worker", worker_argv(default_queues(settings, ws), ws.concurrency, embedded), signal.SIGQUIT, env))
        sup.start(Child("reaper", [sys.executable, "-m", "worker.reaper"], env=env))
        dash_url = None
        if no_dashboard:
            pass
        elif dash.exists():
            dash_url = f"http://{show_host}:{dashboard_port}"
            dash_env, note = dashboard_env(host, api_url, token, env)
            if note:
                err.print(note, soft_wrap=True, markup=False, highlight=False)
            sup.start(Child("dashboard", [sys.executable, "-m", "streamlit", "run", str(dash), "--server.port", str(dashboard_port),
                                          "--server.address", host, "--server.headless", "true",
                                          "--browser.gatherUsageStats", "false",
                                          "--client.toolbarMode", "viewer"],  # no "Deploy" button
                            env=dash_env))
        else:
            err.print("[yellow]dashboard/app.py not found: starting without the dashboard[/]")
        if not wait_healthy(f"{api_url}/api/health", sup):
            bad = sup.dead() or [c for c in sup.children if c.name == "api"]
            for c in bad:
                err.print(f"[red]{c.name} failed[/] (log {safe(c.log)}):\n{safe(tail(c.log))}")
            raise typer.Exit(1)
        print_banner(out, api_url, dash_url, token, token_path(settings) if created else None, sup.log_dir)
        if demo:
            with client(api_url, token) as c:
                sweep = call(c, "POST", "/sweeps", json=demo_sweep(demo_steps))
            out.print(runs_table(sweep["runs"], f"demo sweep {sweep['id']}: GRPO vs DAPO vs AERO, {demo_steps} steps"))
        while stopping["sig"] is None:
            # A child that dies (a SIGKILLed worker or API) is restarted after a backoff; one
            # that keeps dying stops the platform, with the reason and its log's tail.
            reason = sup.check()
            if reason:
                bad = sup.gave_up
                err.print(f"[red]{safe(reason)}[/]" + (f":\n{safe(tail(bad.log))}" if bad else ""), soft_wrap=True)
                code = 1
                break
            time.sleep(0.5)
    finally:
        shutdown(sup, err)
    raise typer.Exit(code)
