"""The lab a soak runs against, all its own: a PostgreSQL cluster, a redis-server, the run
directory on a tmpfs, the API, the reaper and the Celery workers; starting, killing and restarting
them, and cleaning every one up."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import httpx

from benchmarks.soak.options import Options

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    """``<data>/runs`` on a tmpfs of its own, so that the fault can fill it (``faults.start_fill``)."""

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
