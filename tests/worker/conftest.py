"""Fixtures for worker tests: a migrated store on SQLite (a temp file) and on PostgreSQL (a
private schema in the ``test`` database, so parallel suites never see each other's rows)."""

from __future__ import annotations

import os
import uuid

import psycopg
import pytest

from backend.db.migrate import migrate
from backend.db.runs import create_run
from backend.db.session import get_engine, session_scope
from trainer.spec.config import RunConfig, for_method

PG_DSN = os.environ.get("AERO_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def tiny_config(**kw) -> dict:
    """A run of a few seconds on 2 CPU cores: the tiny preset with a small rollout budget."""
    base = dict(method="aero", preset="tiny", steps=4, batch_prompts=4, n_total=4, max_new_tokens=8, eval_every=0,
                eval_problems=4, eval_n=2, checkpoint_every=2, device="cpu",
                aero=dict(n_explore=2, n_max=4, k_max=1))
    if os.environ.get("AERO_TEST_MODEL_PATH"):  # a local checkpoint instead of the shipped preset
        base.update(preset=None, model_path=os.environ["AERO_TEST_MODEL_PATH"])
    cfg = {**base, **kw}
    return RunConfig(**for_method(cfg, cfg["method"])).model_dump(mode="json")  # each method keeps its own sections


@pytest.fixture
def sqlite_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'aero.sqlite'}"
    migrate(url)
    yield url
    get_engine(url).dispose()


@pytest.fixture
def pg_url():
    schema = f"wk_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(PG_DSN, autocommit=True, connect_timeout=3) as c:
            c.execute(f'CREATE SCHEMA "{schema}"')
    except psycopg.OperationalError as e:  # pragma: no cover - CI starts PostgreSQL
        pytest.fail(f"PostgreSQL not reachable at {PG_DSN}: {e}")
    url = PG_DSN.replace("postgresql://", "postgresql+psycopg://", 1) + f"?options=-csearch_path%3D{schema}"
    migrate(url)
    yield url
    get_engine(url).dispose()
    with psycopg.connect(PG_DSN, autocommit=True) as c:
        c.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request):
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture
def make_run(db_url):
    """make_run(**config overrides) -> run id of a new queued run."""

    def make(**kw) -> int:
        with session_scope(db_url) as s:
            return create_run(s, tiny_config(**kw), queue="cpu").id

    return make


# ---------------------------------------------------------------- real processes (end-to-end tests)

import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import httpx  # noqa: E402

from tests.ports import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REDIS_TEST_URL = os.environ.get("AERO_TEST_REDIS", "redis://127.0.0.1:6379/11")  # a DB number of its own


class Platform:
    """A real API (uvicorn) and real Celery workers as subprocesses, on a private store, a private
    data dir and private queue names (so tests sharing one Redis never see each other's tasks)."""

    def __init__(self, tmp_path: Path, db_url: str, broker: str, **env):
        uid = uuid.uuid4().hex[:8]
        self.tmp, self.db_url, self.broker = tmp_path, db_url, broker
        self.queue = f"cpu-{uid}"
        self.env = {
            **os.environ, "AERO_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": db_url,
            "AERO_CPU_QUEUE": self.queue, "AERO_GPU_QUEUE": f"gpu-{uid}", "AERO_MIGRATE_ON_START": "false",
            "AERO_SSE_POLL_S": "0.2", "AERO_HEARTBEAT_S": "1", "AERO_SINK_FLUSH_S": "0", "AERO_BROKER_POLL_S": "0.2",
            "AERO_RESTORE_INTERVAL_S": "1", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
            **{k: str(v) for k, v in env.items()},
        }
        self.env.pop("REDIS_URL", None)
        if os.environ.get("AERO_TEST_MODEL_PATH") and "AERO_DATA_ROOTS" not in env:
            # the operator's data roots (docs/deploy.md §4): the data dir and the test model
            self.env["AERO_DATA_ROOTS"] = os.pathsep.join([str(tmp_path / "data"), os.environ["AERO_TEST_MODEL_PATH"]])
        if broker == "redis":
            self.env["REDIS_URL"] = REDIS_TEST_URL
        self.procs: list[subprocess.Popen] = []
        self.api_url: str | None = None
        from backend.db.tokens import create_token

        with session_scope(db_url) as s:
            _, self.token = create_token(s, "e2e")

    def _spawn(self, name: str, argv: list[str], **env) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "ab")
        p = subprocess.Popen(argv, cwd=ROOT, env={**self.env, **env}, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        p.log_path = self.tmp / f"{name}.log"  # type: ignore[attr-defined]
        self.procs.append(p)
        return p

    def start_api(self) -> None:
        port = free_port()
        p = self._spawn("api", [sys.executable, "-m", "uvicorn", "backend.main:app", "--port", str(port), "--log-level", "warning"])
        self.api_url = f"http://127.0.0.1:{port}"
        self.wait(lambda: self._healthy(), 30, "API health", p)

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.api_url}/api/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def start_worker(self, name: str = "worker", **env) -> subprocess.Popen:
        argv = [sys.executable, "-m", "celery", "-A", "worker.celery_app", "worker", "-Q", self.queue, "-c", "1",
                "--loglevel", "INFO", "--hostname", f"{name}-{uuid.uuid4().hex[:6]}@%h",
                "--without-gossip", "--without-mingle", "--without-heartbeat"]
        p = self._spawn(name, argv, **env)
        self.wait(lambda: "ready." in p.log_path.read_text(errors="replace"), 30, f"{name} ready", p)
        return p

    def kill(self, p: subprocess.Popen, sig=signal.SIGKILL) -> None:
        """Signal the whole process group (a Celery worker is a main process plus pool children)."""
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        p.wait(timeout=30)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=30)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=f"{self.api_url}/api", headers={"Authorization": f"Bearer {self.token}"}, timeout=30)

    def submit(self, c: httpx.Client, **cfg) -> int:
        r = c.post("/runs", json={"config": tiny_config(**cfg)})
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def wait(self, cond, timeout: float, what: str, proc: subprocess.Popen | None = None, every: float = 0.2):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = cond()
            if value:
                return value
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"{what}: process exited {proc.returncode}\n{self.logs()}")
            time.sleep(every)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.logs()}")

    def logs(self, n: int = 40) -> str:
        out = []
        for p in self.procs:
            lines = p.log_path.read_text(errors="replace").splitlines()[-n:]
            out.append(f"--- {p.log_path.name} (rc={p.poll()})\n" + "\n".join(lines))
        return "\n".join(out)


@pytest.fixture
def platform(tmp_path, request):
    """platform(db_url, broker, **env) -> a Platform; all its processes are killed at teardown."""
    made: list[Platform] = []

    def make(db_url: str, broker: str, **env) -> Platform:
        p = Platform(tmp_path, db_url, broker, **env)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()
