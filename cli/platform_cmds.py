"""Platform commands: ``aero up``, ``submit``, ``runs``, ``token``, ``worker``, ``reaper``.

``aero up`` is the embedded default: one command starts the API (uvicorn), one Celery worker,
the reaper and the dashboard as child processes, on a SQLite store and a serverless SQLite
broker under the data directory (DATABASE_URL / REDIS_URL override both). ``submit`` and
``runs`` are thin clients of the REST API (``--api`` / AERO_API_URL, token from ``--token``,
AERO_API_TOKEN or the admin token file that ``aero up`` writes).
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Optional

import httpx
import typer
from rich.console import Console
from rich.table import Table

from cli.common import parse_sets, safe
from trainer.methods.spec import method_names

out = Console()
err = Console(stderr=True)
ROOT = Path(__file__).resolve().parent.parent
TOKEN_FILE = "admin.token"
DEMO_METHODS = ("grpo", "dapo", "aero")

# cli/main.py merges these into the `aero` app, token_app as `aero token`; this module never imports it.
commands = typer.Typer()
token_app = typer.Typer(help="API tokens (stored hashed; each is printed once).", no_args_is_help=True)

# Help texts are Rich markup: "[env ...]" would be read as a style tag and vanish, so the
# environment variables and defaults go in parentheses.
ApiOpt = Annotated[Optional[str], typer.Option("--api", help="API base URL (env AERO_API_URL; default http://127.0.0.1:8000).")]
TokenOpt = Annotated[Optional[str], typer.Option("--token", help="API token (env AERO_API_TOKEN; default <data dir>/admin.token).")]


# ---------------------------------------------------------------- REST client helpers


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
        err.print(f"[red]cannot reach the API at {safe(c.base_url)}[/]: {safe(e)}  (is `aero up` running? set --api / AERO_API_URL)")
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
    t = Table(title=title)  # callers escape the title; every cell from the API is escaped here
    for col in ("id", "name", "method", "status", "progress", "step", "queue", "sweep", "owner", "tags"):
        t.add_column(col, justify="right" if col in ("id", "progress", "step", "sweep") else "left")
    colors = {"succeeded": "green", "failed": "red", "running": "cyan", "cancelled": "yellow", "queued": "white"}
    for r in runs:
        st = r["status"]
        t.add_row(str(r["id"]), safe(r["name"]), safe(r["method"]), f"[{colors.get(st, 'white')}]{safe(st)}[/]",
                  f"{100 * r['progress']:.0f}%", f"{r['current_step']}/{r['total_steps']}", safe(r["queue"]),
                  str(r["sweep_id"] or ""), safe(r.get("owner") or ""), safe(",".join(r["tags"])))
    return t


# ---------------------------------------------------------------- submit / runs / token


def submission(methods: list[str], seeds: list[int], sets: dict, name: str | None, tags: list[str]) -> tuple[str, dict]:
    """(path, body): one run -> POST /runs; several methods or seeds -> POST /sweeps (a grid)."""
    if len(methods) == 1 and len(seeds) <= 1:
        config = {**sets, "method": methods[0], **({"seed": seeds[0]} if seeds else {})}
        return "/runs", {"config": config, "tags": tags, **({"name": name} if name else {})}
    body: dict[str, Any] = {"base": sets, "methods": methods, "tags": tags}
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


def csv_items(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


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
    path, body = submission(methods, seed_list, sets_, name, tag or [])
    with client(api, token) as c:
        created = call(c, "POST", path, json=body)
    runs = [created] if path == "/runs" else created["runs"]
    title = f"sweep {created['id']} ({safe(created['name'])})" if path == "/sweeps" else None
    out.print(runs_table(runs, title))


@commands.command("runs")
def list_runs_cmd(
    status: Annotated[Optional[list[str]], typer.Option("--status", "-s", help="queued|running|succeeded|failed|cancelled; repeatable.")] = None,
    method: Annotated[Optional[list[str]], typer.Option("--method", "-m")] = None,
    tag: Annotated[Optional[str], typer.Option("--tag")] = None,
    sweep: Annotated[Optional[int], typer.Option("--sweep", help="Sweep id.")] = None,
    owner: Annotated[Optional[str], typer.Option("--owner", help="Only runs of this user.")] = None,
    mine: Annotated[bool, typer.Option("--mine", help="Only the runs of the token's own user.")] = False,
    limit: Annotated[int, typer.Option(help="Newest N runs.")] = 50,
    api: ApiOpt = None,
    token: TokenOpt = None,
):
    """List runs (newest first) as a table."""
    params: dict[str, Any] = {"limit": limit}
    for key, val in (("status", status), ("method", method), ("tag", tag), ("sweep_id", sweep), ("owner", owner)):
        if val:
            params[key] = val
    with client(api, token) as c:
        if mine:
            params["owner"] = call(c, "GET", "/me")["user"]
        page = call(c, "GET", "/runs", params=params)
    out.print(runs_table(page["data"], f"{len(page['data'])} of {page['count']} run(s)"))


ROLES = ("admin", "member", "viewer")


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="A label for the token (who or what uses it).")],
    role: Annotated[Optional[str], typer.Option("--role", help="admin: everything, tokens and users too; member: submit and "
                                                "change only their own runs and sweeps; viewer: read only. Default: "
                                                "admin for the store's first token (no live admin yet), else member.")] = None,
    user: Annotated[Optional[str], typer.Option("--user", help="The user the token belongs to (created if new; default NAME).")] = None,
):
    """Create an API token in the configured store and print it (only now: it is stored hashed)."""
    from backend.cli_token import create_token

    if role is not None and role not in ROLES:
        err.print(f"[red]--role must be one of {', '.join(ROLES)}[/], not {safe(role)}")
        raise typer.Exit(2)
    tok, role = create_token(name, role=role, user=user)
    err.print(f"{role} token [bold]{safe(name)}[/] for user [bold]{safe(user or name)}[/] created; it is shown only once:")
    print(tok)


@token_app.command("list")
def token_list():
    """Token names and dates (never the tokens)."""
    from backend.db.migrate import migrate
    from backend.db.session import session_scope
    from backend.db.tokens import list_tokens_with_users
    from backend.settings import get_settings

    url = get_settings().database_url
    migrate(url)
    t = Table("id", "name", "user", "role", "created", "last used", "revoked")
    with session_scope(url) as s:
        for row, user in list_tokens_with_users(s):
            t.add_row(str(row.id), safe(row.name), safe(user), row.role, str(row.created_at)[:19],
                      str(row.last_used_at or "")[:19], str(row.revoked_at or "")[:19])
    out.print(t)


@token_app.command("revoke")
def token_revoke(name: str):
    """Revoke every live token called NAME (recorded in the audit log)."""
    from backend.cli_token import revoke_tokens

    n = revoke_tokens(name)
    err.print(f"revoked {n} token(s) named {safe(name)}")


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
):
    """Start a Celery worker in the foreground ('aero up' starts one for you)."""
    from backend.settings import broker_url, get_settings
    from worker.celery_app import default_queues, is_embedded
    from worker.settings import WorkerSettings

    settings, ws = get_settings(), WorkerSettings()
    qs = csv_items(queues) or default_queues(settings, ws)
    argv = worker_argv(qs, concurrency or ws.concurrency, is_embedded(broker_url(settings)))
    os.chdir(ROOT)
    os.execv(argv[0], argv)


@commands.command()
def reaper(interval: Annotated[Optional[float], typer.Option(help="Seconds between sweeps (env AERO_REAPER_INTERVAL_S; default 10).")] = None):
    """Re-queue or fail runs whose worker vanished ('aero up' starts one for you)."""
    from worker.reaper import main

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


def _die_with_parent() -> None:
    """Child pre-exec (Linux): receive SIGTERM if `aero up` dies without cleaning up."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class Child:
    name: str
    argv: list[str]
    stop_signal: int = signal.SIGTERM
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    log: Path | None = None
    restarts: list[float] = field(default_factory=list)  # monotonic times of the restarts
    restart_at: float | None = None  # when a dead child is due to start again (backoff)


@dataclass
class Supervisor:
    """Starts children in their own sessions (Ctrl-C reaches only `aero up`, which stops them in
    order) with logs in <data dir>/logs, restarts a child that dies (:meth:`check`), and stops
    them all on exit.

    Restart policy: the n-th restart within a minute waits ``backoff_s * 2**(n-1)`` seconds (at
    most ``backoff_max_s``); a child that died ``max_restarts_per_min`` times within a minute is
    not restarted again: :meth:`check` returns why, and `aero up` stops the platform."""

    log_dir: Path
    children: list[Child] = field(default_factory=list)
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    max_restarts_per_min: int = 5
    gave_up: Child | None = None  # the child that kept dying, once check() gave up on it
    say: Callable[[str], None] = field(default=lambda msg: err.print(msg, soft_wrap=True, markup=False, highlight=False))

    def _spawn(self, child: Child) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        child.log = self.log_dir / f"{child.name}.log"
        f = open(child.log, "ab")
        child.proc = subprocess.Popen(child.argv, cwd=ROOT, env={**os.environ, **child.env}, stdout=f, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent)
        f.close()

    def start(self, child: Child) -> Child:
        self._spawn(child)
        self.children.append(child)
        return child

    def dead(self) -> list[Child]:
        return [c for c in self.children if c.proc.poll() is not None]

    def check(self, now: float | None = None) -> str | None:
        """Restart dead children once their backoff has passed; None while the platform can go
        on, else a sentence saying which child keeps dying (then restart nothing more)."""
        now = time.monotonic() if now is None else now
        for c in self.dead():
            if c.restart_at is None:  # a death not seen before
                # Its session may hold orphans (a SIGKILLed Celery main process leaves its pool
                # children, each holding a run): end them before a new one starts.
                try:
                    os.killpg(c.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                c.restarts = [t for t in c.restarts if now - t < 60.0]
                code = c.proc.returncode
                how = f"killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals() else f"exited with {code}"
                if len(c.restarts) >= self.max_restarts_per_min:
                    self.gave_up = c
                    return (f"{c.name} {how} and has died {len(c.restarts) + 1} times within a minute: not restarting it "
                            f"(see its log {c.log}); stopping the platform")
                delay = min(self.backoff_max_s, self.backoff_s * 2 ** len(c.restarts))
                c.restart_at = now + delay
                self.say(f"{c.name} (pid {c.proc.pid}) {how}; restarting it in {delay:.1f} s "
                         f"(restart {len(c.restarts) + 1} of at most {self.max_restarts_per_min} a minute; log {c.log})")
            if now >= c.restart_at:
                old = c.proc.pid
                self._spawn(c)
                c.restarts.append(now)
                c.restart_at = None
                self.say(f"{c.name} restarted (pid {old} -> {c.proc.pid})")
        return None

    def stop(self, grace_s: float = 30.0) -> None:
        """Stop signal to each child, then SIGKILL to any still alive after ``grace_s`` (Celery's
        cold shutdown alone takes 5-15 s on a busy 2-core machine)."""
        for c in self.children:
            if c.proc.poll() is None:
                # The leader only: Celery's main process stops its pool itself (a SIGQUIT that
                # also reaches the pool children leaves the cold shutdown hanging).
                c.proc.send_signal(c.stop_signal)
        deadline = time.monotonic() + grace_s
        for c in self.children:
            try:
                c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                err.print(f"[yellow]{c.name} did not stop in {grace_s:.0f}s: killing it[/]")
                try:
                    os.killpg(c.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                c.proc.wait()


def wait_healthy(url: str, sup: Supervisor, timeout_s: float = 90.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sup.dead():
            return False
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    return False


def tail(path: Path | None, n: int = 25) -> str:
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


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


# Display names of the children, for the final "stopped" line.
CHILD_NAMES = {"api": "API"}


def shutdown(sup: Supervisor, console: Console) -> None:
    """Stop every child, then say so: the last line `aero up` prints, so a user knows nothing of
    the platform is left running."""
    console.print("stopping ...")
    sup.stop()
    names = ", ".join(CHILD_NAMES.get(c.name, c.name) for c in sup.children) or "nothing was running"
    console.print(f"AERO Lab stopped ({names})", soft_wrap=True)


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

    settings, ws = get_settings(), WorkerSettings()
    data = ensure_data_dir(settings)  # 0700; the store, broker and token files in it 0600
    broker = broker_url(settings)
    embedded = is_embedded(broker)
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
        dash = ROOT / "dashboard" / "app.py"
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
