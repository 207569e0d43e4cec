"""Soak the lab under load with faults injected, then check that nothing was lost.

What it starts (all its own, so it may kill and restart them; nothing shared is touched):

* a PostgreSQL cluster (``initdb`` into a temp dir, trust auth, ``pg_ctl -o "-p PORT -k DIR"``,
  run as the ``postgres`` user when this runs as root) and a ``redis-server`` on their own ports;
  ``--store sqlite`` uses the embedded default instead (SQLite store + its SQLite broker, no
  servers), and ``--database-url`` an existing PostgreSQL store (then PostgreSQL is not restarted);
* the run directory (``<data>/runs``) on a tmpfs of ``--tmpfs-mb`` (so the disk can be filled);
* the API (``python -m uvicorn backend.main:app``, as the tests and ``aero up`` start it), the
  reaper and ``--workers`` Celery workers, with DATABASE_URL / REDIS_URL pointing at the above.

The load: ``--users`` members (tokens made in the store, as ``aero token create`` does) submit
``--runs`` short runs in all (tiny preset, ``--steps`` steps, a checkpoint every step) over REST,
as sweeps and single runs: the first user opens with a backlog (4 runs per worker), the others
start ``--user-stagger-s`` apart behind it, and the rest is paced over the soak; ``--sse`` clients
follow the live metric streams of running runs (reconnecting with Last-Event-ID when a stream
breaks); ``--pollers`` clients read runs' metrics with the API's response cache off. Once, a
flooding user sends ``--flood-rps`` requests a second for ``--flood-s`` seconds (valid PATCHes,
invalid and oversized POSTs, async httpx, from a process of its own) against the API's rate limit.
The workers train at the platform's CPU priority (``AERO_WORKER_NICE``, default 10: the API and
the store answer first on a shared host); ``--worker-nice 0`` trains at the API's priority.

Submissions and faults are spread over ``--duration-s`` (default: 15 s per fault + 30 s), then
the runs drain. The faults, at seeded random times, one at a time, each recorded with its time
window: SIGKILL a worker's process group and start a new worker; restart Redis (SIGKILL, then
start it on the same files); restart PostgreSQL (``pg_ctl restart -m fast``); SIGKILL the API
and start it again on the same port; fill the run directory's filesystem (shrink the tmpfs to
what it holds with ``mount -o remount,size=``, write a filler file until ENOSPC, keep it full for
``--disk-full-s`` and until a run was caught in it, delete the filler, grow the tmpfs back); and
SIGKILL the worker of a run that has a checkpoint and steps to go, truncate that checkpoint's
state.pt to half its size, start a new worker (which resumes the run). A fault that needs a run
in progress and finds none within 3 s submits one of its own (user ``soak-target``).
``--store sqlite`` has no Redis or PostgreSQL to restart. The flood is time-boxed to
``--flood-s``: the report gives the rate the client reached (a loaded 2-core box does not send
1,000 httpx requests a second: ~140), and ``--rate-limit`` (per API process) defaults to 20/s so
that rate is well over it. The API runs as the compose file runs it (``python -m backend.serve
--workers 2``); each response's ``Server-Timing`` gives the API's own share of a read's latency.

Redis persistence: the broker must not lose a task message across a restart (the reaper does not
re-send queued runs: docs/deploy.md), so Redis runs with ``--appendonly yes --appendfsync
always`` (every write on disk before Redis answers) and is restarted with SIGKILL, a crash.
``--redis-persistence none`` (``--save "" --appendonly no``) shows what is lost without it.

What is checked (exit code 1 if any invariant is broken; latencies are reported, not asserted):

* every run in the store reaches a terminal state (nothing queued or running is left);
* every run's stored steps are 1..k with no gap; every succeeded run has each of its steps
  exactly once in the step log and in the columnar copy the API reads, with the same values,
  its row at the last step, and its final checkpoint file agreeing with the stored last step
  (step and training time). The worker keeps no metrics.jsonl of its own (its only metric sink
  is the store's DbSink; JsonlSink is ``aero train``'s), so the checkpoint file is the record on
  disk that the store is checked against;
* a run that failed did so for a reason the harness caused: a full disk (the cause names it),
  the checkpoint it truncated (the cause names the checkpoint), or a submission refused while
  the broker or store was down (503); any other failure is a violation;
* every run's newest announced checkpoint (the ``checkpoints`` table) is the file its
  ``checkpoints/latest`` names and loads with torch, except the one the harness truncated;
* each user's first run starts within one run's time (the longest single-attempt run, + 5 s)
  of its submission, unless a fault window overlaps the wait;
* SSE clients that followed a run to its end received every stored step once, across API
  restarts (reconnecting with Last-Event-ID);
* the flood gets 429s, each with Retry-After, and 413s for oversized bodies, while the other
  users' reads get no 429.

Reported: counts of everything, fault windows, the uncached metric read p50/p99 and the
step-to-SSE-event p50/p99 (from the step's row write, ``step_metrics.logged_at``, to the event's
arrival) outside fault windows (+ ``--grace-s``) and apart from the flood (targets 100 ms and
300 ms; the harness shares the machine's cores with everything it measures), and the other
users' read latency during the flood.

Needs root for the tmpfs (``mount``; without it the disk-full fault is skipped and said so); as
root it runs PostgreSQL as the ``postgres`` user. Workers get ``AERO_MAX_ATTEMPTS=10``
(``--max-attempts``), above the faults one run can meet, so that recovery is what is tested. Cleans up every process, mount and temp dir it made, also on
errors and on SIGTERM / Ctrl-C (``--keep`` keeps the temp dir: logs, store).

    .venv/bin/python benchmarks/soak.py --workers 3 --users 5 --runs 60
    .venv/bin/python benchmarks/soak.py --store sqlite --workers 2 --runs 20 --sse 10 --pollers 5
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Callable

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backend.api.server_timing import app_ms  # noqa: E402
from worker.settings import DEFAULT_NICE  # noqa: E402

FAULT_KINDS = ("worker_kill", "redis_restart", "pg_restart", "api_kill", "disk_full", "ckpt_truncate")
SERVERLESS_FAULTS = ("worker_kill", "api_kill", "disk_full", "ckpt_truncate")  # --store sqlite
TERMINAL = ("succeeded", "failed", "cancelled")
DISK_FULL_WORDS = ("no space left", "enospc", "errno 28", "disk full")
SLACK_S = 5.0  # claim + broker poll + stream wake-up, on top of "one run's time"


def now() -> float:
    return time.time()


def epoch(ts: datetime | None) -> float | None:
    """A naive-UTC store timestamp as seconds since the epoch."""
    return None if ts is None else ts.replace(tzinfo=UTC).timestamp()


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- options


@dataclass
class Options:
    store: str = "postgres"  # postgres (own cluster + own Redis) | sqlite (embedded store and broker)
    database_url: str | None = None  # an existing PostgreSQL store instead of an own cluster
    workers: int = 4
    users: int = 5
    runs: int = 200
    sse: int = 50
    pollers: int = 20
    steps: int = 4
    batch_prompts: int = 4
    faults: dict[str, int] = field(default_factory=dict)  # kind -> count; empty = 2 of each that applies
    seed: int = 0
    pg_port: int = 5441
    redis_port: int = 6391
    api_port: int = 0
    redis_persistence: str = "aof"
    tmpfs_mb: int = 512
    disk_full_s: float = 4.0
    flood_s: float = 3.0
    flood_rps: float = 1000.0
    # per API process: a 2-core box with 4 workers training sends ~140 requests/s, not 1,000, so a
    # limit the flood exceeds (2 processes x 20/s + bursts of 40) is what makes it a test of the limiter
    rate_limit: float = 20.0
    max_body_bytes: int = 65536
    api_workers: int = 2  # API processes (backend.serve --workers), as the compose file runs it
    worker_nice: int | None = None  # AERO_WORKER_NICE of the workers; None = the platform's default
    poll_interval_s: float = 0.5
    user_stagger_s: float = 2.0
    duration_s: float = 0.0  # 0 = from the number of faults
    grace_s: float = 5.0
    stale_after_s: float = 15.0
    visibility_timeout_s: float = 30.0
    max_attempts: int = 10
    timeout_s: float = 0.0  # 0 = from the sizes
    base_dir: str | None = None
    keep: bool = False
    quiet: bool = False

    def duration(self) -> float:
        """How long submissions and faults are spread over (the runs then drain)."""
        return self.duration_s or max(60.0, 15.0 * sum(self.fault_plan().values()) + 30.0)

    def fault_plan(self) -> dict[str, int]:
        kinds = SERVERLESS_FAULTS if self.store == "sqlite" else FAULT_KINDS
        plan = dict(self.faults) if self.faults else {k: 2 for k in kinds}
        if self.database_url:
            plan.pop("pg_restart", None)
        return {k: n for k, n in plan.items() if k in kinds and n > 0}


def log(opts: Options, msg: str) -> None:
    if not opts.quiet:
        print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------- processes and services


class Proc:
    """A child in a session of its own (so its whole process group can be signalled), logging to a file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path):
        self.name, self.log_path = name, log_dir / f"{name}.log"
        with open(self.log_path, "ab") as f:
            self.p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        self.pid = self.p.pid

    def alive(self) -> bool:
        return self.p.poll() is None

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 30) -> None:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.pid, signal.SIGKILL)
            self.p.wait(timeout=10)
        # a dead main process may leave pool children in its group: end them too
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])


def wait_until(cond: Callable[[], Any], timeout: float, what: str, every: float = 0.2, proc: Proc | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{what}: {proc.name} exited ({proc.p.returncode})\n{proc.tail()}")
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}" + (f"\n{proc.tail()}" if proc else ""))


class Postgres:
    """An own PostgreSQL cluster in ``root`` (trust auth, unix socket in ``root``, TCP on 127.0.0.1:port)."""

    def __init__(self, root: Path, port: int):
        self.root, self.port = root, port
        self.data, self.logfile = root / "data", root / "postgres.log"
        self.started = False
        self.as_root = os.geteuid() == 0

    def _cmd(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *argv] if self.as_root else argv

    def _run(self, argv: list[str], timeout: float = 120) -> None:
        r = subprocess.run(self._cmd(argv), capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])} failed ({r.returncode}): {r.stdout[-2000:]}{r.stderr[-2000:]}")

    def _ctl(self, *args: str, timeout: float = 120) -> None:
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        self._run([shutil.which("pg_ctl") or "pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-w", "-t", "60",
                   "-o", opts, *args], timeout)

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.as_root:
            import pwd

            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self._run([shutil.which("initdb") or "initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                   "--locale=C", "--no-sync"])
        self._ctl("start")
        self.started = True
        import psycopg

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as c:
            c.execute("CREATE DATABASE aero")

    def dsn(self, db: str = "aero") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/aero"

    def ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.dsn(), connect_timeout=2) as c:
                c.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def restart(self) -> None:
        self._ctl("restart", "-m", "fast")
        wait_until(self.ready, 60, "PostgreSQL after restart")

    def stop(self) -> None:
        if self.started:
            try:
                self._ctl("stop", "-m", "immediate", timeout=60)
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
            self.started = False


class Redis:
    """An own redis-server on ``port`` keeping its files in ``root``."""

    def __init__(self, root: Path, port: int, persistence: str, log_dir: Path, env: dict[str, str]):
        self.root, self.port, self.persistence, self.log_dir, self.env = root, port, persistence, log_dir, env
        self.proc: Proc | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--dir", str(self.root)]
        argv += ["--appendonly", "yes", "--appendfsync", "always"] if self.persistence == "aof" else ["--appendonly", "no"]
        self.proc = Proc(f"redis-{self.restarts}", argv, self.env, self.log_dir)
        wait_until(self.ready, 30, "redis-server", proc=self.proc)

    def ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as c:
                c.sendall(b"PING\r\n")
                return c.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def restart(self) -> None:
        assert self.proc is not None
        self.proc.kill(signal.SIGKILL)
        self.restarts += 1
        self.start()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill(signal.SIGKILL)


class RunsDisk:
    """``<data>/runs`` on a tmpfs of its own, so that the fault can fill it."""

    def __init__(self, path: Path, size_mb: int):
        self.path, self.size_mb = path, size_mb
        self.mounted, self.why_not = False, ""

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        if self.size_mb <= 0:
            self.why_not = "--tmpfs-mb 0: no tmpfs, the disk-full fault is skipped"
            return
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0700", "tmpfs", str(self.path)],
                           capture_output=True, text=True)
        if r.returncode == 0:
            self.mounted = True
        else:
            self.why_not = f"mount -t tmpfs refused ({(r.stderr or r.stdout).strip()}): the disk-full fault is skipped"

    def start_fill(self) -> tuple[int, Path, dict]:
        """Make the filesystem full: shrink the tmpfs to what it holds (``mount -o remount,size=``,
        instant, no memory) and write a filler file until ENOSPC. Returns (fd, filler, detail)."""
        detail: dict[str, Any] = {}
        for extra in (1, 16, 64):  # runs write meanwhile: a size below the usage is refused
            used = shutil.disk_usage(self.path).used
            size_kb = used // 1024 + extra * 1024
            r = subprocess.run(["mount", "-o", f"remount,size={size_kb}k", str(self.path)], capture_output=True, text=True)
            if r.returncode == 0:
                detail["shrunk_to_mb"] = round(size_kb / 1024, 1)
                break
        filler = self.path / f".soak-filler-{uuid.uuid4().hex[:6]}"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        detail["filler_mb"] = round(self.top_up(fd) / 2**20, 2)
        return fd, filler, detail

    def top_up(self, fd: int) -> int:
        """Write to the filler until the filesystem is full again; bytes written."""
        written = 0
        for chunk in (b"\0" * (1 << 20), b"\0" * 4096):
            try:
                while True:
                    written += os.write(fd, chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
        return written

    def end_fill(self, fd: int, filler: Path) -> None:
        os.close(fd)
        filler.unlink(missing_ok=True)
        subprocess.run(["mount", "-o", f"remount,size={self.size_mb}m", str(self.path)], capture_output=True)

    def unmount(self) -> None:
        if self.mounted:
            r = subprocess.run(["umount", str(self.path)], capture_output=True)
            if r.returncode != 0:
                subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
            self.mounted = False


class Lab:
    """The services and the platform's processes for one soak."""

    def __init__(self, opts: Options, root: Path):
        self.opts, self.root = opts, root
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.data = root / "data"
        self.data.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.disk = RunsDisk(self.data / "runs", opts.tmpfs_mb)
        self.pg: Postgres | None = None
        self.redis: Redis | None = None
        self.api: Proc | None = None
        self.api_port = opts.api_port or free_port()
        self.api_starts = 0
        self.workers: list[Proc] = []
        self.worker_seq = 0
        self.reaper: Proc | None = None
        self.all_procs: list[Proc] = []
        self.notes: list[str] = []
        base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL") and not k.startswith("AERO_")}
        self.env = {**base, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "AERO_DATA_DIR": str(self.data),
                    "AERO_MIGRATE_ON_START": "false", "AERO_HEARTBEAT_S": "1", "AERO_SINK_FLUSH_S": "0",
                    "AERO_BROKER_POLL_S": "0.2", "AERO_RESTORE_INTERVAL_S": "2", "AERO_REAPER_INTERVAL_S": "1",
                    "AERO_VISIBILITY_TIMEOUT_S": str(opts.visibility_timeout_s), "AERO_STALE_AFTER_S": str(opts.stale_after_s),
                    "AERO_MAX_ATTEMPTS": str(opts.max_attempts), "AERO_SSE_POLL_S": "1", "AERO_METRICS_CACHE_MB": "0",
                    "AERO_RATE_LIMIT_PER_S": str(opts.rate_limit), "AERO_RATE_LIMIT_BURST": str(2 * opts.rate_limit),
                    "AERO_MAX_BODY_BYTES": str(opts.max_body_bytes),
                    **({} if opts.worker_nice is None else {"AERO_WORKER_NICE": str(opts.worker_nice)})}
        self.url = ""

    # ------------------------------------------------------------ services

    def start_services(self) -> None:
        from backend.db.migrate import migrate

        if dropped := sorted(k for k, n in self.opts.faults.items() if n > 0 and k not in self.opts.fault_plan()):
            self.notes.append(f"faults that do not apply here, not injected: {', '.join(dropped)}")
        self.disk.mount()
        if not self.disk.mounted:
            self.notes.append(self.disk.why_not)
        if self.opts.store == "sqlite":
            self.url = f"sqlite:///{self.data / 'aero.sqlite'}"
        else:
            if self.opts.database_url:
                self.url = self.opts.database_url
            else:
                os.chmod(self.root, 0o755)  # the postgres user must reach its directory
                self.pg = Postgres(self.root / "pg", self.opts.pg_port or free_port())
                self.pg.start()
                self.url = self.pg.url
            self.redis = Redis(self.root / "redis", self.opts.redis_port or free_port(), self.opts.redis_persistence,
                               self.logs, self.env)
            self.redis.start()
            self.env["REDIS_URL"] = self.redis.url
        if self.opts.store != "sqlite":
            self.env["DATABASE_URL"] = self.url
        migrate(self.url)

    # ------------------------------------------------------------ platform processes

    def _spawn(self, name: str, argv: list[str]) -> Proc:
        p = Proc(name, argv, self.env, self.logs)
        self.all_procs.append(p)
        return p

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.api_url}/api/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def start_api(self) -> None:
        # as the compose file runs it: one process per core, each on its own SO_REUSEPORT socket
        self.api = self._spawn(f"api-{self.api_starts}", [sys.executable, "-m", "backend.serve", "--workers", str(self.opts.api_workers),
                                                          "--host", "127.0.0.1", "--port", str(self.api_port), "--log-level",
                                                          "warning", "--no-access-log"])
        self.api_starts += 1
        wait_until(self.healthy, 60, "API health", proc=self.api)

    def kill_api(self) -> None:
        assert self.api is not None
        self.api.kill(signal.SIGKILL)

    def start_worker(self, wait: bool = True) -> Proc:
        i = self.worker_seq
        self.worker_seq += 1
        p = self._spawn(f"worker-{i}", [sys.executable, "-m", "celery", "-A", "worker.celery_app", "worker", "-Q", "cpu", "-c",
                                        "1", "--loglevel", "INFO", "--hostname", f"soak{i}-{uuid.uuid4().hex[:6]}@%h",
                                        "--without-gossip", "--without-mingle", "--without-heartbeat"])
        self.workers.append(p)
        if wait:
            self.wait_worker(p)
        return p

    def wait_worker(self, p: Proc) -> None:
        wait_until(lambda: "ready." in p.log_text(), 120, f"{p.name} ready", proc=p)

    def kill_worker(self, p: Proc) -> None:
        p.kill(signal.SIGKILL)
        if p in self.workers:
            self.workers.remove(p)

    def worker_of_pid(self, pid: int) -> Proc | None:
        """The worker whose process group holds ``pid`` (a pool process)."""
        try:
            pgid = os.getpgid(pid)
        except ProcessLookupError:
            return None
        return next((w for w in self.workers if w.pid == pgid and w.alive()), None)

    def start_platform(self) -> None:
        self.start_api()
        self.reaper = self._spawn("reaper", [sys.executable, "-m", "worker.reaper", "--interval", "1"])
        # The first worker alone: on a fresh embedded broker, workers starting together race to
        # create kombu's queue row and one dies (UNIQUE constraint failed: kombu_queue.name).
        self.start_worker()
        started = [self.start_worker(wait=False) for _ in range(self.opts.workers - 1)]
        for p in started:
            self.wait_worker(p)

    def close(self) -> None:
        for p in self.all_procs:  # every group, alive or not: a dead Celery main may leave pool processes
            try:
                p.kill(signal.SIGKILL, timeout=15)
            except Exception:  # noqa: BLE001 - cleanup goes on whatever one process does
                pass
        if self.redis is not None:
            self.redis.stop()
        if self.pg is not None:
            self.pg.stop()
        self.disk.unmount()
        try:
            from backend.db.session import get_engine

            if self.url:
                get_engine(self.url).dispose()
        except Exception:  # noqa: BLE001
            pass


# ---------------------------------------------------------------- what the load records


@dataclass
class Window:
    kind: str
    start: float
    end: float
    detail: dict = field(default_factory=dict)


@dataclass
class Follow:
    """One SSE client following one run: (step, arrival, connection start) per metrics event."""

    client: int
    run_id: int
    events: list[tuple[int, float, float]] = field(default_factory=list)
    reconnects: int = 0
    reconnects_with_id: int = 0
    reconnect_times: list[float] = field(default_factory=list)
    ended: bool = False
    end_status: str | None = None


@dataclass
class Record:
    t0: float = 0.0
    loadavg_start: float = 0.0
    windows: list[Window] = field(default_factory=list)
    skipped_faults: list[dict] = field(default_factory=list)
    submissions: Counter = field(default_factory=Counter)
    accepted: dict[int, dict] = field(default_factory=dict)  # run id -> {user, t}
    reads: list[tuple[float, float, int | str, str]] = field(default_factory=list)  # (t, seconds, status, user)
    read_app_ms: list[tuple[float, float]] = field(default_factory=list)  # (t, the API's Server-Timing app ms) of 200s
    follows: list[Follow] = field(default_factory=list)
    sse_statuses: Counter = field(default_factory=Counter)
    flood: dict = field(default_factory=dict)
    files: dict[int, dict] = field(default_factory=dict)  # run id -> checkpoint file check
    truncated: dict[int, dict] = field(default_factory=dict)  # run id -> the checkpoint the harness truncated
    runs: dict[int, Any] = field(default_factory=dict)  # the monitor's latest view of the store
    done_submitting: bool = False
    stop: bool = False


def tiny_config(method: str, steps: int, batch_prompts: int, seed: int = 0) -> dict:
    """A run of a few seconds: the tiny preset, a small rollout budget, a checkpoint every step."""
    from trainer.config import RunConfig, for_method

    cfg = dict(method=method, preset="tiny", steps=steps, batch_prompts=batch_prompts, n_total=4, max_new_tokens=8,
               eval_every=0, eval_problems=4, eval_n=2, checkpoint_every=1, device="cpu", seed=seed,
               aero=dict(n_explore=2, n_max=4, k_max=1))
    return RunConfig(**for_method(cfg, method)).model_dump(mode="json")


# ---------------------------------------------------------------- store reads (the harness is the operator)


def snapshot(url: str) -> dict[int, Any]:
    from sqlalchemy import select

    from backend.db.models import Run
    from backend.db.session import session_scope

    with session_scope(url) as s:
        rows = s.execute(select(Run.id, Run.owner, Run.status, Run.current_step, Run.total_steps, Run.attempts, Run.worker,
                                Run.created_at, Run.started_at, Run.finished_at)).all()
    return {r.id: r for r in rows}


def check_files(url: str, runs_dir: Path, run_id: int) -> dict:
    """The run's newest announced checkpoint against the files: it is what ``checkpoints/latest``
    names, and it loads, at its step; and the file's step and training time next to the run's last
    stored step."""
    import torch
    from sqlalchemy import select

    from backend.db.models import Checkpoint, StepMetric
    from backend.db.session import session_scope

    out: dict[str, Any] = {"announced": None}
    with session_scope(url) as s:
        row = s.execute(select(Checkpoint.step, Checkpoint.path).where(Checkpoint.run_id == run_id)
                        .order_by(Checkpoint.step.desc()).limit(1)).first()
        last = s.execute(select(StepMetric.step, StepMetric.metrics).where(StepMetric.run_id == run_id)
                         .order_by(StepMetric.step.desc()).limit(1)).first()
    ckdir = runs_dir / str(run_id) / "checkpoints"
    latest = (ckdir / "latest").read_text().strip() if (ckdir / "latest").exists() else None
    out["latest_file"] = latest
    if row is not None:
        out["announced"] = row.step
        path = Path(row.path) / "state.pt"
        out["is_latest"] = Path(row.path).name == latest
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)
            out["loads"] = True
            out["file_step"] = int(state.get("step", -1))
            out["file_elapsed_s"] = state.get("elapsed_s")
        except Exception as e:  # noqa: BLE001 - any load failure is the finding
            out["loads"] = False
            out["load_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    if last is not None:
        out["last_step"] = last.step
        out["last_elapsed_s"] = (last.metrics or {}).get("time/elapsed_s")
    return out


# ---------------------------------------------------------------- the load (asyncio)


class Load:
    def __init__(self, opts: Options, lab: Lab, tokens: dict[str, Any], rec: Record, rng: random.Random):
        self.opts, self.lab, self.tokens, self.rec, self.rng = opts, lab, tokens, rec, rng
        self.api = lab.api_url
        self.disk_full = False  # while set, the janitor does not delete checkpoints (space must stay full)

    def auth(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    # ------------------------------------------------------------ monitor + janitor

    async def monitor(self) -> None:
        checking: set[int] = set()
        pending_prune: list[int] = []
        while not self.rec.stop:
            if self.lab.disk.mounted and not self.disk_full:
                while pending_prune:  # the runs' checkpoints, once checked: keeps the tmpfs small
                    shutil.rmtree(self.lab.disk.path / str(pending_prune.pop()) / "checkpoints", ignore_errors=True)
            try:
                self.rec.runs = await asyncio.to_thread(snapshot, self.lab.url)
            except Exception:  # noqa: BLE001 - the store may be restarting
                await asyncio.sleep(0.5)
                continue
            done = [r.id for r in self.rec.runs.values() if r.status in TERMINAL and r.id not in self.rec.files
                    and r.id not in checking]
            for rid in done[:4]:
                checking.add(rid)
                try:
                    self.rec.files[rid] = await asyncio.to_thread(check_files, self.lab.url, self.lab.disk.path, rid)
                    pending_prune.append(rid)
                except Exception:  # noqa: BLE001 - store restarting: next round
                    pass
                checking.discard(rid)
            await asyncio.sleep(0.5)

    # ------------------------------------------------------------ submitters

    async def submitter(self, user: str, token: str, share: int, delay: float, rng: random.Random,
                        opening: int = 0) -> None:
        """Submit ``share`` runs as single runs and sweeps: ``opening`` of them at once (a backlog
        for fair share to order), the rest spread over the soak's duration."""
        await asyncio.sleep(delay)
        end = self.rec.t0 + 0.85 * self.opts.duration()
        done, seed = 0, 0
        async with httpx.AsyncClient(base_url=f"{self.api}/api", headers=self.auth(token), timeout=30) as c:
            while done < share and not self.rec.stop:
                left = share - done
                if opening > done:  # the opening backlog: both methods x as many seeds as it takes
                    methods = ["grpo", "aero"] if opening - done >= 2 else ["grpo"]
                    seeds = list(range(seed, seed + max(1, (opening - done) // len(methods))))
                elif left == 1 or rng.random() < 0.4:  # a single run
                    methods, seeds = [rng.choice(("grpo", "aero"))], [seed]
                else:  # a sweep: one or both methods x 1-3 seeds, within what is left
                    methods = ["grpo", "aero"] if left >= 2 and rng.random() < 0.5 else [rng.choice(("grpo", "aero"))]
                    k = max(1, min(rng.randint(1, 3), left // len(methods)))
                    seeds = list(range(seed, seed + k))
                n = len(methods) * len(seeds)
                try:
                    if n == 1:
                        body = {"config": tiny_config(methods[0], self.opts.steps, self.opts.batch_prompts, seed)}
                        r = await c.post("/runs", json=body)
                        ids = [r.json()["id"]] if r.status_code == 201 else []
                    else:
                        # the last method's config (AERO's when both: its section; GRPO's runs drop it)
                        base = tiny_config(methods[-1], self.opts.steps, self.opts.batch_prompts)
                        r = await c.post("/sweeps", json={"name": f"soak-{user}", "base": base, "methods": methods,
                                                          "seeds": seeds})
                        ids = [x["id"] for x in r.json()["runs"]] if r.status_code == 201 else []
                    status: int | str = r.status_code
                except httpx.HTTPError as e:
                    status, ids = type(e).__name__, []
                self.rec.submissions[f"{'run' if n == 1 else 'sweep'} {status}"] += 1
                if ids:
                    t = now()
                    for rid in ids:
                        self.rec.accepted[rid] = {"user": user, "t": t}
                    done += len(ids)
                    seed += len(seeds)
                    if done < share and done >= opening:  # pace the rest: ~2.2 runs a batch until the end
                        batches = max(1.0, (share - done) / 2.2)
                        await asyncio.sleep(max(0.0, end - now()) / batches * (0.5 + rng.random()))
                elif status == 429:
                    await asyncio.sleep(float(r.headers.get("retry-after", 1)))
                else:  # refused (broker or store down: 503) or the API away: try again soon
                    await asyncio.sleep(1 + rng.random())

    # ------------------------------------------------------------ SSE clients

    def pick_run(self, rng: random.Random) -> int | None:
        """A running run, or (half the time, and when none runs) one of the next queued ones, so that
        the stream is open before the run's first step."""
        running = [r.id for r in self.rec.runs.values() if r.status == "running"]
        queued = sorted(r.id for r in self.rec.runs.values() if r.status == "queued")[: 2 * self.opts.workers]
        if queued and (not running or rng.random() < 0.5):
            return rng.choice(queued)
        return rng.choice(running) if running else None

    async def sse_client(self, i: int, token: str, rng: random.Random) -> None:
        timeout = httpx.Timeout(10, read=40)
        async with httpx.AsyncClient(base_url=f"{self.api}/api", headers=self.auth(token), timeout=timeout) as c:
            while not self.rec.stop:
                rid = self.pick_run(rng)
                if rid is None:
                    await asyncio.sleep(0.5)
                    continue
                f = Follow(client=i, run_id=rid)
                self.rec.follows.append(f)
                await self.follow(c, f)

    async def follow(self, c: httpx.AsyncClient, f: Follow) -> None:
        last: int | None = None
        first = True
        while not self.rec.stop:
            headers = {"Last-Event-ID": str(last)} if last is not None else {}
            if not first:
                f.reconnects += 1
                f.reconnects_with_id += last is not None
                f.reconnect_times.append(now())
            first = False
            t_conn = now()
            try:
                async with c.stream("GET", f"/runs/{f.run_id}/metrics/stream", params={"keys": "reward/mean"},
                                    headers=headers) as r:
                    self.rec.sse_statuses[r.status_code] += 1
                    if r.status_code == 429:
                        await asyncio.sleep(float(r.headers.get("retry-after", 1)))
                        continue
                    if r.status_code != 200:
                        await asyncio.sleep(1)
                        continue
                    event, data = None, None
                    async for line in r.aiter_lines():
                        if self.rec.stop:
                            return
                        if line.startswith("event:"):
                            event = line[6:].strip()
                        elif line.startswith("data:"):
                            data = line[5:].strip()
                        elif line == "" and event is not None and data is not None:
                            if event == "metrics":
                                step = json.loads(data)["step"]
                                f.events.append((step, now(), t_conn))
                                last = step
                            elif event == "end":
                                f.ended, f.end_status = True, json.loads(data).get("status")
                                return
                            event, data = None, None
            except (httpx.HTTPError, ValueError):
                self.rec.sse_statuses["transport error"] += 1
            await asyncio.sleep(0.3)

    # ------------------------------------------------------------ pollers

    async def poller(self, i: int, token: str, rng: random.Random) -> None:
        user = f"poller-{i}"
        async with httpx.AsyncClient(base_url=f"{self.api}/api", headers=self.auth(token), timeout=30) as c:
            while not self.rec.stop:
                ids = [r.id for r in self.rec.runs.values() if r.current_step >= 1]
                if not ids:
                    await asyncio.sleep(0.5)
                    continue
                rid = rng.choice(ids)
                t0, p0 = now(), time.perf_counter()
                try:
                    r = await c.get(f"/runs/{rid}/metrics", params={"keys": "reward/mean,time/step_s"})
                    status: int | str = r.status_code
                    app = app_ms(r.headers.get("server-timing"))
                    if r.status_code == 200 and app is not None:
                        self.rec.read_app_ms.append((t0, app))
                    if r.status_code == 429:
                        await asyncio.sleep(float(r.headers.get("retry-after", 1)))
                except httpx.HTTPError as e:
                    status = type(e).__name__
                self.rec.reads.append((t0, time.perf_counter() - p0, status, user))
                await asyncio.sleep(self.opts.poll_interval_s * (0.5 + rng.random()))

    # ------------------------------------------------------------ the flood

    async def flood(self, token: str, own_run: int | None) -> None:
        """The flood comes from a process of its own: from the harness' event loop, which also
        drives every SSE client and poller, a loaded box sent a third of the rate it reached alone."""
        opts = self.opts
        big = json.dumps({"config": tiny_config("grpo", 2, 2), "notes": "x" * (opts.max_body_bytes + 4096)})
        job = {"api": self.api, "token": token, "own_run": own_run, "rps": opts.flood_rps, "seconds": opts.flood_s,
               "big": big}
        child = await asyncio.create_subprocess_exec(sys.executable, str(Path(__file__).resolve()), "--flood-child",
                                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT)
        out, _ = await child.communicate(json.dumps(job).encode())
        if child.returncode != 0:
            raise RuntimeError(f"the flood process exited {child.returncode}")
        f = json.loads(out)
        by_status: Counter = Counter()
        for k, v in f["counts"].items():
            by_status[k.split(" ", 1)[1]] += v
        self.rec.flood = {"start": f["t0"], "end": f["t1"], "aimed_rps": opts.flood_rps, "requests": f["n"],
                          "sent_s": round(f["sent_s"], 2), "achieved_rps": round(f["n"] / max(f["sent_s"], 1e-9)),
                          "by_kind_status": f["counts"], "by_status": dict(by_status),
                          "429_with_retry_after": f["retry_after_ok"], "429_without_retry_after": f["retry_after_bad"]}
        self.rec.windows.append(Window("flood", f["t0"], f["t1"], {"requests": f["n"], "achieved_rps": self.rec.flood["achieved_rps"]}))

    # ------------------------------------------------------------ faults

    def running_owned(self, runs: dict[int, Any] | None = None) -> list[tuple[Any, Proc]]:
        """(run, its worker) for each running run owned by one of our live workers."""
        out = []
        for r in (self.rec.runs if runs is None else runs).values():
            if r.status != "running" or not r.worker:
                continue
            parts = r.worker.rsplit(":", 2)
            if len(parts) == 3 and parts[1].isdigit() and (w := self.lab.worker_of_pid(int(parts[1]))) is not None:
                out.append((r, w))
        return out

    def wait_for(self, find: Callable[[dict[int, Any]], Any], timeout: float = 30.0) -> Any:
        """Poll the store every 0.1 s until ``find(runs)`` returns something (a fault's target)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.rec.stop:
            try:
                found = find(snapshot(self.lab.url))
            except Exception:  # noqa: BLE001 - the store may be restarting
                found = None
            if found:
                return found
            time.sleep(0.1)
        return None

    def target(self, find: Callable[[dict[int, Any]], Any], wait_s: float = 60.0) -> Any:
        """What ``find`` picks in the store; when nothing fits within 3 s (the lab is between runs),
        submit a run of the ``soak-target`` user over REST and wait for it (or anything) to fit."""
        found = self.wait_for(find, 3)
        if found:
            return found
        try:
            r = httpx.post(f"{self.api}/api/runs", headers=self.auth(self.tokens["target"]), timeout=30,
                           json={"config": tiny_config("grpo", self.opts.steps, self.opts.batch_prompts)})
            if r.status_code == 201:
                self.rec.accepted[r.json()["id"]] = {"user": "soak-target", "t": now()}
                self.rec.submissions[f"target run {r.status_code}"] += 1
        except httpx.HTTPError:
            pass
        return self.wait_for(find, wait_s)

    def fault_worker_kill(self, rng: random.Random) -> Window | None:
        busy = self.target(self.running_owned) or []
        run, w = rng.choice(busy) if busy else (None, rng.choice(self.lab.workers))
        t0 = now()
        self.lab.kill_worker(w)
        t_killed = now()
        self.lab.start_worker()
        return Window("worker_kill", t0, now(), {"worker": w.name, "run": run.id if run else None,
                                                  "kill_s": round(t_killed - t0, 2)})

    def fault_ckpt_truncate(self, rng: random.Random) -> Window | None:
        """SIGKILL the worker of a run that has a checkpoint and steps to go, truncate that
        checkpoint's state.pt to half its size, start a new worker (which resumes the run)."""
        from backend.db.models import Run
        from backend.db.session import session_scope

        def find(runs):
            return [(r, w) for r, w in self.running_owned(runs) if 1 <= r.current_step < self.opts.steps
                    and r.id not in self.rec.truncated and (self.lab.disk.path / str(r.id) / "checkpoints" / "latest").exists()]

        cands = self.target(find)
        if not cands:
            self.rec.skipped_faults.append({"kind": "ckpt_truncate", "why": "no running run with a checkpoint and steps to go"})
            return None
        run, w = rng.choice(cands)
        t0 = now()
        self.lab.kill_worker(w)
        ckdir = self.lab.disk.path / str(run.id) / "checkpoints"
        with session_scope(self.lab.url) as s:
            row = s.get(Run, run.id)
            status, owner = row.status, row.worker
        if status != "running" or owner != run.worker:  # it ended before the kill landed: a plain worker kill
            self.lab.start_worker()
            self.rec.skipped_faults.append({"kind": "ckpt_truncate", "why": f"run {run.id} was {status} by the kill"})
            return Window("worker_kill", t0, now(), {"worker": w.name, "run": run.id, "note": "ckpt_truncate target ended"})
        name = (ckdir / "latest").read_text().strip()
        state = ckdir / name / "state.pt"
        size = state.stat().st_size
        with open(state, "r+b") as f:
            f.truncate(size // 2)
        self.rec.truncated[run.id] = {"checkpoint": name, "size": size, "t": now()}
        t_cut = now()
        self.lab.start_worker()
        return Window("ckpt_truncate", t0, now(), {"worker": w.name, "run": run.id, "checkpoint": name,
                                                    "truncated_to": size // 2, "kill_to_truncate_s": round(t_cut - t0, 3)})

    def busy(self, runs: dict[int, Any]) -> list[int]:
        """Runs training (past their first step): what a restart should catch in the middle."""
        return [r.id for r in runs.values() if r.status == "running" and r.current_step >= 1]

    def fault_redis_restart(self, rng: random.Random) -> Window | None:
        assert self.lab.redis is not None
        running = self.target(self.busy) or []
        t0 = now()
        self.lab.redis.restart()
        return Window("redis_restart", t0, now(), {"persistence": self.opts.redis_persistence, "running": running})

    def fault_pg_restart(self, rng: random.Random) -> Window | None:
        assert self.lab.pg is not None
        running = self.target(self.busy) or []
        t0 = now()
        self.lab.pg.restart()
        return Window("pg_restart", t0, now(), {"running": running})

    def fault_api_kill(self, rng: random.Random) -> Window | None:
        def streaming(runs):  # wait (up to 30 s) for SSE clients following a running run
            return sum(1 for f in self.rec.follows if not f.ended and f.events and runs.get(f.run_id) is not None
                       and runs[f.run_id].status == "running")

        self.target(streaming)
        open_streams = sum(1 for f in self.rec.follows if not f.ended)
        t0 = now()
        self.lab.kill_api()
        self.lab.start_api()
        return Window("api_kill", t0, now(), {"sse_streams_open": open_streams})

    def fault_disk_full(self, rng: random.Random) -> Window | None:
        """Fill the run directory's filesystem, keep it full for ``--disk-full-s`` and until a run
        was caught training or starting in it (submitting one if none comes), then free it."""
        if not self.lab.disk.mounted:
            self.rec.skipped_faults.append({"kind": "disk_full", "why": self.lab.disk.why_not})
            return None
        disk = self.lab.disk
        self.target(self.busy)  # something to catch: a run past its first step, if one comes within 3 s
        t0 = now()
        self.disk_full = True
        fd, filler, detail = disk.start_fill()
        caught: set[int] = set()
        submitted = False
        try:
            while True:
                disk.top_up(fd)  # a run deleting its older checkpoint frees space: take it back
                try:
                    caught |= {r.id for r in snapshot(self.lab.url).values() if r.status == "running"}
                except Exception:  # noqa: BLE001
                    pass
                held = now() - t0
                if held >= self.opts.disk_full_s and caught or held > 60:
                    break
                if held >= self.opts.disk_full_s and not submitted:
                    self.target(lambda runs: [], wait_s=0)  # submits a target run (it starts on a full disk)
                    submitted = True
                time.sleep(0.1)
            detail["free_bytes_while_full"] = shutil.disk_usage(disk.path).free
        finally:
            disk.end_fill(fd, filler)
            self.disk_full = False
        return Window("disk_full", t0, now(), {**detail, "running": sorted(caught)})

    async def injector(self, plan: list[tuple[float, str]], flood_at: float | None, flood_token: str,
                       flood_run: int | None) -> None:
        """Fire each planned fault at its time (seconds after the start), one at a time."""
        rng = random.Random(self.opts.seed + 7)
        events = sorted(plan + ([(flood_at, "flood")] if flood_at is not None else []))
        for at, kind in events:
            while not self.rec.stop and now() < self.rec.t0 + at:
                await asyncio.sleep(0.2)
            if self.rec.stop:
                return
            if kind == "flood":
                log(self.opts, f"flood: {self.opts.flood_rps:g} req/s for {self.opts.flood_s:g}s")
                await self.flood(flood_token, flood_run)
                continue
            log(self.opts, f"fault: {kind} (planned at {at:.0f}s)")
            w = None
            try:
                w = await asyncio.to_thread(getattr(self, f"fault_{kind}"), rng)
            except Exception as e:  # noqa: BLE001 - a fault that could not be made is reported, the soak goes on
                self.rec.skipped_faults.append({"kind": kind, "why": f"{type(e).__name__}: {e}"[:300]})
            if w is not None:
                self.rec.windows.append(w)
                log(self.opts, f"  {w.kind}: {w.end - w.start:.1f}s {w.detail}")
            await asyncio.sleep(2.0)


def plan_faults(opts: Options) -> tuple[list[tuple[float, str]], float | None]:
    """(seconds after the start, kind) of each fault, seeded, spread over the soak; and the flood's time."""
    rng = random.Random(opts.seed)
    d = opts.duration()
    kinds = [k for k, n in sorted(opts.fault_plan().items()) for _ in range(n)]
    rng.shuffle(kinds)
    plan = [(rng.uniform(0.05, 0.9) * d, k) for k in kinds]
    flood_at = rng.uniform(0.1, 0.8) * d if opts.flood_s > 0 and opts.flood_rps > 0 else None
    return plan, flood_at


def make_tokens(url: str, opts: Options) -> dict[str, Any]:
    from backend.db.tokens import create_token
    from backend.db.session import session_scope

    out: dict[str, Any] = {"users": {}, "sse": [], "pollers": []}
    with session_scope(url) as s:
        for i in range(opts.users):
            out["users"][f"soak-user-{i}"] = create_token(s, f"soak-user-{i}", "member")[1]
        out["flooder"] = create_token(s, "soak-flooder", "member")[1]
        out["target"] = create_token(s, "soak-target", "member")[1]  # the runs faults submit for themselves
        out["sse"] = [create_token(s, f"soak-sse-{i}", "viewer")[1] for i in range(opts.sse)]
        out["pollers"] = [create_token(s, f"soak-poll-{i}", "viewer")[1] for i in range(opts.pollers)]
    return out


async def drive(opts: Options, lab: Lab, rec: Record) -> None:
    rng = random.Random(opts.seed)
    tokens = make_tokens(lab.url, opts)
    load = Load(opts, lab, tokens, rec, rng)
    rec.t0, rec.loadavg_start = now(), round(os.getloadavg()[0], 2)
    flood_run = None
    async with httpx.AsyncClient(base_url=f"{lab.api_url}/api", headers=load.auth(tokens["flooder"]), timeout=30) as c:
        r = await c.post("/runs", json={"config": tiny_config("grpo", opts.steps, opts.batch_prompts)})
        if r.status_code == 201:
            flood_run = r.json()["id"]
            rec.accepted[flood_run] = {"user": "soak-flooder", "t": now()}
    users = list(tokens["users"].items())
    shares = [opts.runs // len(users) + (1 if i < opts.runs % len(users) else 0) for i in range(len(users))]
    plan, flood_at = plan_faults(opts)
    tasks = [asyncio.create_task(load.monitor())]
    opening = min(shares[0], 4 * opts.workers)  # user 0 opens with a backlog; the others arrive behind it
    subs = [asyncio.create_task(load.submitter(u, t, shares[i], i * opts.user_stagger_s, random.Random(opts.seed * 100 + i),
                                               opening if i == 0 else 0)) for i, (u, t) in enumerate(users)]
    tasks += [asyncio.create_task(load.sse_client(i, t, random.Random(opts.seed * 1000 + i))) for i, t in enumerate(tokens["sse"])]
    tasks += [asyncio.create_task(load.poller(i, t, random.Random(opts.seed * 2000 + i))) for i, t in enumerate(tokens["pollers"])]
    inj = asyncio.create_task(load.injector(plan, flood_at, tokens["flooder"], flood_run))
    deadline = time.monotonic() + (opts.timeout_s or (opts.duration() + 300 + 30 * (opts.runs + 1) / max(1, opts.workers)))
    try:
        await asyncio.gather(*subs)
        rec.done_submitting = True
        log(opts, f"all {len(rec.accepted)} runs submitted; waiting for them to end")
        while time.monotonic() < deadline:
            await asyncio.sleep(1)
            if not inj.done():
                continue
            try:  # a snapshot of its own, taken now: the monitor's may predate the last submissions
                runs = await asyncio.to_thread(snapshot, lab.url)
            except Exception:  # noqa: BLE001 - the store may be restarting
                continue
            if all(rid in runs for rid in rec.accepted) and all(r.status in TERMINAL for r in runs.values()) \
                    and all(rid in rec.files for rid in runs):
                break
        else:
            log(opts, "deadline reached with runs still active")
        if not inj.done():
            rec.stop = True
            await inj
    finally:
        rec.stop = True
        for t in tasks + subs + [inj]:
            t.cancel()
        await asyncio.gather(*tasks, *subs, inj, return_exceptions=True)


# ---------------------------------------------------------------- the checks


@dataclass
class Invariant:
    name: str
    checked: int = 0
    broken: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.broken


def in_windows(t: float, windows: list[Window], grace: float, kinds: tuple[str, ...] | None = None) -> bool:
    return any(w.start - 0.5 <= t <= w.end + grace for w in windows if kinds is None or w.kind in kinds)


def analyse(opts: Options, lab: Lab, rec: Record) -> dict:
    from sqlalchemy import select

    from backend.db.metrics import read_step_metrics
    from backend.db.models import MetricChunk, Run, StepMetric
    from backend.db.session import session_scope

    url = lab.url
    faults = [w for w in rec.windows if w.kind != "flood"]
    with session_scope(url) as s:
        runs = {r.id: r for r in s.scalars(select(Run).order_by(Run.id))}
        steps: dict[int, list[tuple[int, float | None, Any]]] = defaultdict(list)
        for rid, step, logged, metrics in s.execute(select(StepMetric.run_id, StepMetric.step, StepMetric.logged_at,
                                                           StepMetric.metrics).order_by(StepMetric.run_id, StepMetric.step)):
            steps[rid].append((step, epoch(logged), (metrics or {}).get("reward/mean")))
        chunks: dict[int, list[int]] = defaultdict(list)
        for rid, _, arr in s.execute(select(MetricChunk.run_id, MetricChunk.chunk, MetricChunk.steps)
                                     .order_by(MetricChunk.run_id, MetricChunk.chunk)):
            chunks[rid].extend(json.loads(arr))
        columnar = {rid: read_step_metrics(s, rid, ["reward/mean"]) for rid in runs}
    for rid in runs:  # runs that ended after the monitor's last look
        if rid not in rec.files and runs[rid].status in TERMINAL:
            rec.files[rid] = check_files(url, lab.disk.path, rid)

    inv = {k: Invariant(k) for k in ("terminal", "no_gaps", "succeeded_steps_once", "columnar_matches_log",
                                     "row_at_last_step", "checkpoint_file_matches_store", "failures_explained",
                                     "announced_checkpoint_loads", "first_run_within_one_run", "sse_no_missed_step",
                                     "sse_no_duplicate_step", "flood_429_retry_after", "flood_413", "others_not_limited")}
    status_counts = Counter(r.status for r in runs.values())
    one_run = [(r.finished_at - r.started_at).total_seconds() for r in runs.values()
               if r.status == "succeeded" and r.attempts == 1 and r.started_at and r.finished_at]
    one_run_s = max(one_run) if one_run else None
    failure_causes: Counter = Counter()
    resumed = sum(1 for r in runs.values() if r.attempts > 1)
    for rid, r in runs.items():
        st = [x[0] for x in steps.get(rid, [])]
        inv["terminal"].checked += 1
        if r.status not in TERMINAL:
            inv["terminal"].broken.append(f"run {rid} {r.status} (step {r.current_step}/{r.total_steps}, attempts {r.attempts})")
        inv["no_gaps"].checked += 1
        if st != list(range(1, len(st) + 1)):
            inv["no_gaps"].broken.append(f"run {rid} ({r.status}) stored steps {st[:12]}{'...' if len(st) > 12 else ''}")
        if r.status == "succeeded":
            total = int(r.config.get("steps", r.total_steps))
            inv["succeeded_steps_once"].checked += 1
            if st != list(range(1, total + 1)):
                inv["succeeded_steps_once"].broken.append(f"run {rid}: steps {st} for {total}")
            inv["columnar_matches_log"].checked += 1
            col = columnar[rid]
            log_vals = [None if v is None else float(v) for _, _, v in steps.get(rid, [])]
            if chunks.get(rid, []) != st or col.steps != st or col.series.get("reward/mean") != log_vals:
                inv["columnar_matches_log"].broken.append(f"run {rid}: chunk steps {chunks.get(rid)} vs log {st}")
            inv["row_at_last_step"].checked += 1
            if (r.current_step, r.total_steps, r.progress) != (total, total, 1.0):
                inv["row_at_last_step"].broken.append(f"run {rid}: row at {r.current_step}/{r.total_steps}, progress {r.progress}")
            f = rec.files.get(rid, {})
            inv["checkpoint_file_matches_store"].checked += 1
            if not (f.get("loads") and f.get("file_step") == total == f.get("last_step")
                    and f.get("file_elapsed_s") == f.get("last_elapsed_s")):
                inv["checkpoint_file_matches_store"].broken.append(f"run {rid}: file {f}")
        if r.status == "failed":
            cause = classify_failure(r, rec, faults, opts.grace_s)
            failure_causes[cause] += 1
            inv["failures_explained"].checked += 1
            if cause.startswith("UNEXPLAINED"):
                inv["failures_explained"].broken.append(f"run {rid}: {cause}")
        f = rec.files.get(rid)
        if f is not None and f.get("announced") is not None:
            inv["announced_checkpoint_loads"].checked += 1
            harness_broke_it = rid in rec.truncated and f.get("latest_file") == rec.truncated[rid]["checkpoint"] \
                and r.status == "failed"
            if not (f.get("loads") and f.get("is_latest") and f.get("file_step") == f.get("announced")) and not harness_broke_it:
                inv["announced_checkpoint_loads"].broken.append(f"run {rid} ({r.status}): {f}")

    # fair share: each user's first accepted run
    waits = {}
    for user in sorted({a["user"] for a in rec.accepted.values()}):
        first = min(rid for rid, a in rec.accepted.items() if a["user"] == user)
        r = runs.get(first)
        if r is None or r.started_at is None:
            continue
        wait = (r.started_at - r.created_at).total_seconds()
        overlap = any(w.start <= epoch(r.started_at) and w.end >= epoch(r.created_at) for w in faults)
        waits[user] = {"run": first, "wait_s": round(wait, 1), "fault_overlap": overlap}
        inv["first_run_within_one_run"].checked += 1
        if one_run_s is not None and wait > one_run_s + SLACK_S and not overlap:
            inv["first_run_within_one_run"].broken.append(f"{user}: run {first} waited {wait:.1f}s > {one_run_s:.1f}s + {SLACK_S:g}s")
    inv["first_run_within_one_run"].note = f"one run's time = {one_run_s and round(one_run_s, 1)} s (+{SLACK_S:g} s)"

    # SSE
    logged = {(rid, s_): t for rid, lst in steps.items() for s_, t, _ in lst}
    sse_lat, sse_relogged, sse_catchup = [], 0, 0
    reconnects = reconnects_with_id = reconnects_in_api_kill = complete = 0
    for f in rec.follows:
        reconnects += f.reconnects
        reconnects_with_id += f.reconnects_with_id
        reconnects_in_api_kill += sum(1 for t in f.reconnect_times if in_windows(t, rec.windows, 3.0, ("api_kill",)))
        got = [e[0] for e in f.events]
        if f.ended:
            complete += 1
            stored = [x[0] for x in steps.get(f.run_id, [])]
            inv["sse_no_missed_step"].checked += 1
            missing = sorted(set(stored) - set(got))
            if missing:
                inv["sse_no_missed_step"].broken.append(f"client {f.client} run {f.run_id}: missed {missing} "
                                                        f"(got {got}, reconnects {f.reconnects})")
            inv["sse_no_duplicate_step"].checked += 1
            dup = sorted(k for k, n in Counter(got).items() if n > 1)
            if dup:
                inv["sse_no_duplicate_step"].broken.append(f"client {f.client} run {f.run_id}: twice {dup}")
        for step, arrived, t_conn in f.events:
            t_log = logged.get((f.run_id, step))
            if t_log is None:
                continue
            if t_conn >= t_log:
                sse_catchup += 1
                continue
            if arrived < t_log:
                sse_relogged += 1
                continue
            if in_windows(t_log, rec.windows, opts.grace_s) or in_windows(arrived, rec.windows, opts.grace_s):
                continue
            sse_lat.append(arrived - t_log)

    # reads
    flood = rec.flood
    fw = (flood.get("start", -1), flood.get("end", -1))
    outside = [d for t, d, st, _ in rec.reads if st == 200 and not in_windows(t, rec.windows, opts.grace_s)]
    app_outside = [ms / 1000.0 for t, ms in rec.read_app_ms if not in_windows(t, rec.windows, opts.grace_s)]
    during_flood = [(d, st) for t, d, st, _ in rec.reads if fw[0] <= t <= fw[1]]
    read_status = Counter(str(st) for _, _, st, _ in rec.reads)
    errors_outside = sum(1 for t, _, st, _ in rec.reads if st != 200 and not in_windows(t, rec.windows, opts.grace_s))
    if flood:
        by = flood["by_status"]
        inv["flood_429_retry_after"].checked = by.get("429", 0)
        if not by.get("429") or flood["429_without_retry_after"]:
            inv["flood_429_retry_after"].broken.append(f"429s {by.get('429', 0)}, without Retry-After {flood['429_without_retry_after']}")
        inv["flood_413"].checked = sum(v for k, v in flood["by_kind_status"].items() if k.startswith("oversized"))
        if not flood["by_kind_status"].get("oversized 413"):
            inv["flood_413"].broken.append(f"no 413 among oversized bodies: {flood['by_kind_status']}")
        inv["others_not_limited"].checked = len(during_flood)
        limited = sum(1 for _, st in during_flood if st == 429)
        if limited:
            inv["others_not_limited"].broken.append(f"{limited} of the other users' reads got 429 during the flood")
    ok_flood = [d for d, st in during_flood if st == 200]

    report = {
        "setup": {"store": opts.store if not opts.database_url else "postgres (external)", "workers": opts.workers,
                  "users": opts.users, "runs_target": opts.runs, "sse_clients": opts.sse, "pollers": opts.pollers,
                  "steps": opts.steps, "batch_prompts": opts.batch_prompts, "seed": opts.seed,
                  "worker_nice": DEFAULT_NICE if opts.worker_nice is None else opts.worker_nice,
                  "api_workers": opts.api_workers,
                  "duration_s": opts.duration(),
                  "redis_persistence": opts.redis_persistence if opts.store != "sqlite" else None,
                  "tmpfs_mb": opts.tmpfs_mb if lab.disk.mounted else None, "cpus": os.cpu_count(),
                  "loadavg_1m_start": rec.loadavg_start, "loadavg_1m_end": round(os.getloadavg()[0], 2), "wall_s": round(now() - rec.t0, 1)},
        "runs": {"in_store": len(runs), "accepted_201": len(rec.accepted), **{f"status {k}": v for k, v in sorted(status_counts.items())},
                 "resumed (attempts > 1)": resumed, "submissions": dict(rec.submissions),
                 "failure causes": dict(failure_causes), "steps stored": sum(len(v) for v in steps.values())},
        "faults": [{"kind": w.kind, "at_s": round(w.start - rec.t0, 1), "duration_s": round(w.end - w.start, 1), **w.detail}
                   for w in sorted(rec.windows, key=lambda w: w.start)],
        "fault_counts": dict(Counter(w.kind for w in rec.windows)),
        "skipped": list(rec.skipped_faults) + [{"kind": "note", "why": n} for n in lab.notes],
        "latency": {
            "metric_read_ms (uncached, outside windows)": _ms(outside), "metric_read_target_p99_ms": 100,
            "metric_read_app_ms (the API's own time, Server-Timing)": _ms(app_outside),
            "step_to_sse_ms (outside windows)": _ms(sse_lat), "step_to_sse_target_p99_ms": 300,
            "reads by status": dict(read_status), "read errors outside windows": errors_outside,
            "sse samples excluded: connected after the write": sse_catchup,
            "sse samples excluded: step re-logged after a resume": sse_relogged,
        },
        "sse": {"follows": len(rec.follows), "followed to end": complete, "reconnects": reconnects,
                "reconnects with Last-Event-ID": reconnects_with_id, "reconnects during API restarts": reconnects_in_api_kill,
                "connect statuses": {str(k): v for k, v in rec.sse_statuses.items()}},
        "flood": {k: v for k, v in flood.items() if k not in ("start", "end")} | {
            "other users' reads during flood": len(during_flood), "their latency ms": _ms(ok_flood)},
        "fair_share": waits,
        "invariants": [{"name": i.name, "checked": i.checked, "broken": len(i.broken), "ok": i.ok, "note": i.note,
                        "examples": i.broken[:5]} for i in inv.values()],
    }
    report["violations"] = [f"{i.name}: {b}" for i in inv.values() for b in i.broken]
    return report


def _ms(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(1e3 * pct(values, 50), 1), "p99": round(1e3 * pct(values, 99), 1),
            "max": round(1e3 * max(values), 1)}


def classify_failure(run: Any, rec: Record, faults: list[Window], grace: float) -> str:
    """Why a run failed, if the harness caused it; ``UNEXPLAINED ...`` otherwise."""
    err = run.error or ""
    head = err.splitlines()[0] if err else ""
    low = head.lower()
    started, finished = epoch(run.started_at), epoch(run.finished_at) or now()
    created = epoch(run.created_at)

    def hit(kinds: tuple[str, ...]) -> bool:
        lo = started if started is not None else created
        return any(w.kind in kinds and w.start - grace <= finished and w.end + grace >= lo for w in faults)

    if head.startswith("could not enqueue"):
        return "submit refused (broker down)" if hit(("redis_restart", "pg_restart", "api_kill")) else f"UNEXPLAINED {head[:160]}"
    if any(w in low for w in DISK_FULL_WORDS):
        return "disk full" if hit(("disk_full",)) else f"UNEXPLAINED disk full outside a disk_full window: {head[:160]}"
    if run.id in rec.truncated:
        return "truncated checkpoint" if "checkpoint" in low else f"UNEXPLAINED (truncated checkpoint, cause does not name it): {head[:160]}"
    if hit(("disk_full",)):
        return f"UNEXPLAINED (in a disk_full window, cause does not name the full disk): {head[:160]}"
    return f"UNEXPLAINED {head[:200]}"


# ---------------------------------------------------------------- output


def print_report(report: dict) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich is a dependency of the CLI
        Console = Table = None  # type: ignore[assignment,misc]

    def rows(section: str, d: dict) -> list[tuple[str, str, str]]:
        return [(section, str(k), json.dumps(v) if isinstance(v, (dict, list)) else str(v)) for k, v in d.items()]

    out: list[tuple[str, str, str]] = []
    out += rows("setup", report["setup"])
    out += rows("runs", report["runs"])
    out += rows("faults", report["fault_counts"])
    for f in report["faults"]:
        out.append(("fault", f"{f['kind']} @ {f['at_s']}s", json.dumps({k: v for k, v in f.items() if k not in ("kind", "at_s")})))
    for s in report["skipped"]:
        out.append(("skipped", s["kind"], s["why"]))
    out += rows("latency", report["latency"])
    out += rows("sse", report["sse"])
    out += rows("flood", report["flood"])
    out += rows("fair share", report["fair_share"])
    for i in report["invariants"]:
        verdict = "ok" if i["ok"] else f"BROKEN x{i['broken']}"
        detail = f"checked {i['checked']}" + (f"; {i['note']}" if i["note"] else "") + ("".join(f"\n  {e}" for e in i["examples"]))
        out.append(("invariant", f"{i['name']}: {verdict}", detail))
    out.append(("result", "violations", str(len(report["violations"]))))
    if Table is not None:
        t = Table("section", "count", "value", title="AERO Lab soak", show_lines=False)
        for r in out:
            t.add_row(*r)
        Console(width=200).print(t)
    else:
        for r in out:
            print(f"{r[0]:<10} {r[1]:<48} {r[2]}")


# ---------------------------------------------------------------- entry points


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def run(opts: Options) -> dict:
    """Start everything, soak, check, clean up; the report (``report["violations"]`` empty when every invariant held)."""
    made_root = opts.base_dir is None
    root = Path(tempfile.mkdtemp(prefix="aero-soak-")) if made_root else Path(opts.base_dir)
    root.mkdir(parents=True, exist_ok=True)
    lab = Lab(opts, root)
    rec = Record()
    prev = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM cleans up like Ctrl-C
    try:
        log(opts, f"services in {root}")
        import torch  # noqa: F401 - the checkpoint checks load it; imported now, not in the middle of the measurements

        lab.start_services()
        lab.start_platform()
        log(opts, f"API {lab.api_url}, {len(lab.workers)} workers, store {lab.url.split('@')[-1]}")
        asyncio.run(drive(opts, lab, rec))
        report = analyse(opts, lab, rec)
        report["setup"]["root"] = str(root) if opts.keep else None
        return report
    except BaseException:
        for p in lab.all_procs[-6:]:
            print(f"--- {p.name} (alive={p.alive()})\n{p.tail(15)}", file=sys.stderr)
        raise
    finally:
        lab.close()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, prev)
        if not opts.keep:
            shutil.rmtree(root, ignore_errors=True)


async def flood_requests(job: dict) -> dict:
    """One user's flood (``--flood-child``: the job on stdin, the counts on stdout): an open loop at
    ``rps`` for ``seconds`` at most, a third each of oversized bodies (413), invalid configs (422)
    and valid PATCHes of the user's own run; a busy client falls behind rather than queueing."""
    counts: Counter = Counter()
    retry_after_ok = retry_after_bad = 0
    big, own_run, rps = job["big"].encode(), job["own_run"], job["rps"]
    bad = {"config": {"method": "grpo", "steps": "many", "no_such_field": 1}}
    n = max(1, int(rps * job["seconds"]))
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    sem = asyncio.Semaphore(256)
    headers = {"Authorization": f"Bearer {job['token']}"}
    async with httpx.AsyncClient(base_url=f"{job['api']}/api", headers=headers, timeout=10, limits=limits) as c:

        async def one(i: int) -> None:
            nonlocal retry_after_ok, retry_after_bad
            kind = ("oversized", "invalid", "valid")[i % 3]
            try:
                if kind == "oversized":
                    r = await c.post("/runs", content=big, headers={"content-type": "application/json"})
                elif kind == "invalid" or own_run is None:
                    r = await c.post("/runs", json=bad)
                else:
                    r = await c.patch(f"/runs/{own_run}", json={"tags": [f"flood-{i % 7}"]})
                counts[f"{kind} {r.status_code}"] += 1
                if r.status_code == 429:
                    ra = r.headers.get("retry-after", "")
                    if ra.isdigit() and int(ra) >= 1:
                        retry_after_ok += 1
                    else:
                        retry_after_bad += 1
            except httpx.HTTPError as e:
                counts[f"{kind} {type(e).__name__}"] += 1
            finally:
                sem.release()

        tasks = []
        t0, p0 = now(), time.perf_counter()
        for i in range(n):
            if time.perf_counter() - p0 >= job["seconds"]:
                break
            delay = p0 + i / rps - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await sem.acquire()
            tasks.append(asyncio.create_task(one(i)))
        sent_s = time.perf_counter() - p0
        await asyncio.gather(*tasks)
        t1 = now()
    return {"t0": t0, "t1": t1, "n": len(tasks), "sent_s": sent_s, "counts": dict(counts),
            "retry_after_ok": retry_after_ok, "retry_after_bad": retry_after_bad}


def parse_faults(spec: str) -> dict[str, int]:
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        kind, _, n = part.partition("=")
        if kind not in FAULT_KINDS:
            raise argparse.ArgumentTypeError(f"unknown fault {kind!r} (one of {', '.join(FAULT_KINDS)})")
        out[kind] = int(n or 1)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--flood-child"]:
        print(json.dumps(asyncio.run(flood_requests(json.load(sys.stdin)))))
        return 0
    d = Options()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", choices=["postgres", "sqlite"], default=d.store,
                    help="postgres: own PostgreSQL cluster + own Redis; sqlite: the embedded default (SQLite store and broker)")
    ap.add_argument("--database-url", default=None, help="use this existing PostgreSQL store (it is not restarted)")
    ap.add_argument("--workers", type=int, default=d.workers, help="Celery workers, one run each (2 cores: 2-4)")
    ap.add_argument("--users", type=int, default=d.users, help="members submitting runs")
    ap.add_argument("--runs", type=int, default=d.runs, help="runs submitted in all (accepted, 201)")
    ap.add_argument("--sse", type=int, default=d.sse, help="SSE clients following live metric streams")
    ap.add_argument("--pollers", type=int, default=d.pollers, help="clients reading metrics (response cache off)")
    ap.add_argument("--steps", type=int, default=d.steps, help="steps per run (a checkpoint every step)")
    ap.add_argument("--batch-prompts", type=int, default=d.batch_prompts)
    ap.add_argument("--faults", type=parse_faults, default={},
                    help="KIND=N,... of " + ", ".join(FAULT_KINDS) + " (default: 2 of each that applies)")
    ap.add_argument("--no-faults", action="store_true", help="load only")
    ap.add_argument("--seed", type=int, default=d.seed, help="seeds the fault times, the users' choices and the readers")
    ap.add_argument("--pg-port", type=int, default=d.pg_port, help="own PostgreSQL's port (0: a free one)")
    ap.add_argument("--redis-port", type=int, default=d.redis_port, help="own Redis' port (0: a free one)")
    ap.add_argument("--api-port", type=int, default=d.api_port, help="the API's port (0: a free one)")
    ap.add_argument("--redis-persistence", choices=["aof", "none"], default=d.redis_persistence,
                    help="aof: appendonly + appendfsync always (no task lost across a restart); none: --save '' --appendonly no")
    ap.add_argument("--tmpfs-mb", type=int, default=d.tmpfs_mb, help="size of the run directory's tmpfs (0: none, no disk-full fault)")
    ap.add_argument("--disk-full-s", type=float, default=d.disk_full_s, help="how long the disk stays full")
    ap.add_argument("--flood-s", type=float, default=d.flood_s, help="flood duration (0: no flood)")
    ap.add_argument("--flood-rps", type=float, default=d.flood_rps,
                    help="flood requests per second aimed at (the report says what the client reached)")
    ap.add_argument("--rate-limit", type=float, default=d.rate_limit, help="AERO_RATE_LIMIT_PER_S of the API (burst 2x)")
    ap.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes, help="AERO_MAX_BODY_BYTES of the API")
    ap.add_argument("--api-workers", type=int, default=d.api_workers,
                    help="API processes (python -m backend.serve --workers N; the compose file's 2); rate limits are per process")
    ap.add_argument("--worker-nice", type=int, default=None,
                    help="AERO_WORKER_NICE of the workers (default: the platform's, 10; 0 trains at the API's priority)")
    ap.add_argument("--poll-interval-s", type=float, default=d.poll_interval_s, help="each poller's mean pause between reads")
    ap.add_argument("--user-stagger-s", type=float, default=d.user_stagger_s, help="user i starts submitting i times this late")
    ap.add_argument("--duration-s", type=float, default=d.duration_s,
                    help="seconds the submissions and faults are spread over (0: 15 s per fault + 30 s, at least 60)")
    ap.add_argument("--grace-s", type=float, default=d.grace_s, help="seconds after a fault window still excluded from latency")
    ap.add_argument("--stale-after-s", type=float, default=d.stale_after_s, help="AERO_STALE_AFTER_S of the workers and reaper")
    ap.add_argument("--visibility-timeout-s", type=float, default=d.visibility_timeout_s, help="AERO_VISIBILITY_TIMEOUT_S (Redis)")
    ap.add_argument("--max-attempts", type=int, default=d.max_attempts,
                    help="AERO_MAX_ATTEMPTS: above the faults a run can meet, so recovery is tested, not giving up")
    ap.add_argument("--timeout-s", type=float, default=d.timeout_s, help="give up waiting for runs after this (0: from the sizes)")
    ap.add_argument("--base-dir", default=None, help="work directory (default: a new temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, SQLite store) afterwards")
    ap.add_argument("--json", type=Path, default=None, help="also write the report as JSON")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    opts = Options(**{k: getattr(a, k) for k in Options.__dataclass_fields__ if hasattr(a, k)})
    if a.no_faults:
        opts.faults = {k: 0 for k in FAULT_KINDS}
    if opts.store == "sqlite" and opts.database_url:
        ap.error("--database-url is for --store postgres")
    report = run(opts)
    print_report(report)
    if a.json:
        a.json.write_text(json.dumps(report, indent=2, default=str))
    return 1 if report["violations"] else 0


__all__ = ["Options", "run", "main"]

if __name__ == "__main__":
    sys.exit(main())
