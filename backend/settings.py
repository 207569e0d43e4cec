"""Platform settings, read once from the environment (pydantic-settings).

Embedded defaults need no server: a SQLite store and a Celery broker over SQLite (kombu's
SQLAlchemy transport), both files under the data directory. Set ``DATABASE_URL`` and
``REDIS_URL`` for PostgreSQL and Redis in production.

=====================  ===============================================  =======================
env variable           meaning                                          default
=====================  ===============================================  =======================
AERO_DATA_DIR          directory for the SQLite store, broker, runs     ``./aero-data``
DATABASE_URL           SQLAlchemy URL of the store                      ``sqlite:///<data>/aero.sqlite``
REDIS_URL              Celery broker; unset = embedded SQLite broker    unset
AUTH_PROTECT_READS     also require a token for GET endpoints           ``false``
AERO_MAX_BODY_BYTES    request bodies above this answer 413             ``1048576``
AERO_RATE_LIMIT_PER_S  requests per second per token / address (429)   ``0`` (off)
AERO_RATE_LIMIT_BURST  requests a caller may send at once above that     ``2 x the rate``
AERO_SSE_POLL_S        SSE fallback poll (change signals wake streams)  ``1.0``
AERO_METRICS_CACHE_MB  per-process cache of metric responses (0 = off)  ``64``
AERO_MIGRATE_ON_START  run Alembic ``upgrade head`` when the app starts  ``true``
AERO_DB_IDLE_TX_TIMEOUT_S  PostgreSQL: end transactions idle this long  ``30`` (0 = never)
AERO_DATA_ROOTS        where run configs may read models and data       the data directory
AERO_SANDBOX_*         code sandbox isolation, interpreter, uid, caps   see docs/deploy.md
AERO_MAX_*             caps on a run config's sizes (steps, batch...)   see docs/deploy.md
AERO_QUOTA_ACTIVE_RUNS  per user: queued + running runs (0 = no limit)  ``0``
AERO_QUOTA_RUNNING_RUNS per user: runs running at once (0 = no limit)   ``0``
AERO_QUOTA_RUN_WORK     per run: steps x batch_prompts x n_total        ``0`` (no limit)
AERO_PRIORITY_MAX_ADMIN   highest run priority an admin may submit      ``10``
AERO_PRIORITY_MAX_MEMBER  highest run priority a member may submit      ``5``
=====================  ===============================================  =======================

The run policy (``AERO_SANDBOX_*``, ``AERO_MAX_*``, ``AERO_DATA_ROOTS``; trainer/spec/operator_policy.py) is
the operator's: the API applies it to every submitted config and each worker re-checks it,
from its own environment, before any compute.

The data directory holds every run, token hash and queued message: it is created (or chmod'ed,
when ours) 0700 and the platform's files in it 0600 (:func:`ensure_data_dir`), and the platform
processes (API, worker, reaper, ``aero up``; everything that reads :func:`get_settings`) run with
umask 0o077, so nothing they create is readable by another user (such as the code sandbox's).
"""

from __future__ import annotations

import os
import stat
from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from trainer.spec.operator_policy import RunPolicy, platform_denied


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    data_dir: Path = Field(Path("aero-data"), validation_alias=AliasChoices("AERO_DATA_DIR", "data_dir"))
    database_url_env: str | None = Field(None, validation_alias=AliasChoices("DATABASE_URL", "database_url"))
    redis_url: str | None = Field(None, validation_alias=AliasChoices("REDIS_URL", "redis_url"))
    auth_protect_reads: bool = Field(False, validation_alias=AliasChoices("AUTH_PROTECT_READS", "auth_protect_reads"))
    max_body_bytes: int = Field(1 << 20, ge=1, validation_alias=AliasChoices("AERO_MAX_BODY_BYTES", "max_body_bytes"))
    # per-caller token buckets (backend/api/rate_limit.py): 0 = off (aero up's one user)
    rate_limit_per_s: float = Field(0.0, ge=0, validation_alias=AliasChoices("AERO_RATE_LIMIT_PER_S", "rate_limit_per_s"))
    rate_limit_burst: float | None = Field(None, gt=0, validation_alias=AliasChoices("AERO_RATE_LIMIT_BURST",
                                                                                     "rate_limit_burst"))
    sse_poll_s: float = Field(1.0, gt=0, validation_alias=AliasChoices("AERO_SSE_POLL_S", "sse_poll_s"))
    metrics_cache_mb: float = Field(64, ge=0, validation_alias=AliasChoices("AERO_METRICS_CACHE_MB", "metrics_cache_mb"))
    # Threads per API process that run the blocking route code (anyio's default is 40). The
    # routes are CPU-bound under the GIL, so many threads only queue on it, and every store round
    # trip then waits a GIL switch to resume (BENCHMARKS.md, "Uncached reads: balanced workers").
    api_threads: int = Field(2, ge=1, le=256, validation_alias=AliasChoices("AERO_API_THREADS", "api_threads"))
    migrate_on_start: bool = Field(True, validation_alias=AliasChoices("AERO_MIGRATE_ON_START", "migrate_on_start"))
    cpu_queue: str = Field("cpu", validation_alias=AliasChoices("AERO_CPU_QUEUE", "cpu_queue"))
    gpu_queue: str = Field("gpu", validation_alias=AliasChoices("AERO_GPU_QUEUE", "gpu_queue"))
    # Per-user quotas (backend/services/quotas.py); 0 means no limit. Active and work quotas are
    # checked at submit (429); the running quota by the workers' claim (worker/claim.py).
    quota_active_runs: int = Field(0, ge=0, validation_alias=AliasChoices("AERO_QUOTA_ACTIVE_RUNS", "quota_active_runs"))
    quota_running_runs: int = Field(0, ge=0, validation_alias=AliasChoices("AERO_QUOTA_RUNNING_RUNS", "quota_running_runs"))
    quota_run_work: int = Field(0, ge=0, validation_alias=AliasChoices("AERO_QUOTA_RUN_WORK", "quota_run_work"))
    quota_running_gpus: int = Field(0, ge=0, validation_alias=AliasChoices("AERO_QUOTA_RUNNING_GPUS", "quota_running_gpus"))
    # The highest run priority (0..10) each role may submit (backend/services/priority.py); a viewer
    # submits nothing. Above it, the submission answers 422 naming ``priority``.
    priority_max_admin: int = Field(10, ge=0, le=10, validation_alias=AliasChoices("AERO_PRIORITY_MAX_ADMIN",
                                                                                   "priority_max_admin"))
    priority_max_member: int = Field(5, ge=0, le=10, validation_alias=AliasChoices("AERO_PRIORITY_MAX_MEMBER",
                                                                                   "priority_max_member"))
    # The operator's run policy, from the AERO_SANDBOX_* / AERO_MAX_* / AERO_DATA_ROOTS variables
    # (trainer.spec.operator_policy.ENV); tests pass ``policy=RunPolicy(...)``. Use ``run_policy``.
    policy: RunPolicy = Field(default_factory=RunPolicy.from_env, validation_alias=AliasChoices("policy"))

    @property
    def run_policy(self) -> RunPolicy:
        """The policy applied to run configs: data roots default to the data directory, whose
        platform files (admin token, store, broker, logs) are refused under any root."""
        roots = self.policy.data_roots if self.policy.data_roots is not None else (self.data_path,)
        denied = (*self.policy.denied, *platform_denied(self.data_path))
        return self.policy.model_copy(update={"data_roots": roots, "denied": denied})

    @property
    def data_path(self) -> Path:
        """The data directory as an absolute path (created on first use by the store)."""
        return self.data_dir.expanduser().resolve()

    @property
    def database_url(self) -> str:
        """``DATABASE_URL`` if set, else the SQLite file ``<data dir>/aero.sqlite``."""
        return self.database_url_env or f"sqlite:///{self.data_path / 'aero.sqlite'}"

    @property
    def runs_dir(self) -> Path:
        """Where workers keep each run's checkpoints and logs: ``<data dir>/runs/<run id>``."""
        return self.data_path / "runs"


def broker_url(settings: Settings) -> str:
    """The Celery broker URL shared by the API (sender) and the workers.

    ``REDIS_URL`` when set; otherwise kombu's SQLAlchemy transport over the SQLite file
    ``<data dir>/broker.sqlite``, which needs no server (polling, no remote control).
    """
    if settings.redis_url:
        return settings.redis_url
    ensure_data_dir(settings)
    private_file(settings.data_path / "broker.sqlite", create=True)  # SQLite gives its journals the file's mode
    return f"sqla+sqlite:///{settings.data_path / 'broker.sqlite'}"


PRIVATE_UMASK = 0o077
# the platform's files directly in the data directory (SQLite journals: -wal, -shm, -journal)
PLATFORM_FILES = ("aero.sqlite*", "broker.sqlite*", "admin.token*", "*.migrate.lock")


def private_umask() -> None:
    """Tighten this process's umask to 0o077 (files 0600, directories 0700; never loosened)."""
    os.umask(os.umask(PRIVATE_UMASK) | PRIVATE_UMASK)


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) with mode 0700; chmod it 0700 if it exists and is ours."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o077:
        path.chmod(stat.S_IMODE(st.st_mode) & 0o700)
    return path


def private_file(path: Path, create: bool = False) -> None:
    """chmod ``path`` and its SQLite journals (-wal, -shm, -journal) to 0600 where they exist and
    are ours; ``create``: create ``path`` empty with mode 0600 first if missing (SQLite then
    creates its journals with the same mode)."""
    path = Path(path)
    if create:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        except FileExistsError:
            pass
    for p in (path, *(path.with_name(path.name + s) for s in ("-wal", "-shm", "-journal"))):
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(p, stat.S_IMODE(st.st_mode) & 0o600)


def ensure_data_dir(settings: Settings) -> Path:
    """The data directory, created 0700 (chmod'ed 0700 if ours), with the platform's existing
    files in it (store, broker, their journals, admin token, migration lock) chmod'ed 0600."""
    d = private_dir(settings.data_path)
    for pattern in PLATFORM_FILES:
        for f in d.glob(pattern):
            private_file(f)
    return d


@lru_cache
def get_settings() -> Settings:
    """Process-wide settings from the environment (cached; tests build their own ``Settings``).
    A platform process reads them first, so this is where its umask becomes 0o077."""
    private_umask()
    return Settings()
