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
AERO_SSE_POLL_S        how often the SSE stream polls the store         ``1.0``
AERO_METRICS_CACHE_MB  per-process cache of metric responses (0 = off)  ``64``
AERO_MIGRATE_ON_START  run Alembic ``upgrade head`` when the app starts  ``true``
AERO_DATA_ROOTS        where run configs may read models and data       the data directory
AERO_SANDBOX_*         code sandbox isolation, interpreter, uid, caps   see docs/deploy.md
AERO_MAX_*             caps on a run config's sizes (steps, batch...)   see docs/deploy.md
=====================  ===============================================  =======================

The run policy (``AERO_SANDBOX_*``, ``AERO_MAX_*``, ``AERO_DATA_ROOTS``; trainer/policy.py) is
the operator's: the API applies it to every submitted config and each worker re-checks it,
from its own environment, before any compute.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from trainer.policy import RunPolicy, platform_denied


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    data_dir: Path = Field(Path("aero-data"), validation_alias=AliasChoices("AERO_DATA_DIR", "data_dir"))
    database_url_env: str | None = Field(None, validation_alias=AliasChoices("DATABASE_URL", "database_url"))
    redis_url: str | None = Field(None, validation_alias=AliasChoices("REDIS_URL", "redis_url"))
    auth_protect_reads: bool = Field(False, validation_alias=AliasChoices("AUTH_PROTECT_READS", "auth_protect_reads"))
    max_body_bytes: int = Field(1 << 20, ge=1, validation_alias=AliasChoices("AERO_MAX_BODY_BYTES", "max_body_bytes"))
    sse_poll_s: float = Field(1.0, gt=0, validation_alias=AliasChoices("AERO_SSE_POLL_S", "sse_poll_s"))
    metrics_cache_mb: float = Field(64, ge=0, validation_alias=AliasChoices("AERO_METRICS_CACHE_MB", "metrics_cache_mb"))
    migrate_on_start: bool = Field(True, validation_alias=AliasChoices("AERO_MIGRATE_ON_START", "migrate_on_start"))
    cpu_queue: str = Field("cpu", validation_alias=AliasChoices("AERO_CPU_QUEUE", "cpu_queue"))
    gpu_queue: str = Field("gpu", validation_alias=AliasChoices("AERO_GPU_QUEUE", "gpu_queue"))
    # The operator's run policy, from the AERO_SANDBOX_* / AERO_MAX_* / AERO_DATA_ROOTS variables
    # (trainer.policy.ENV); tests pass ``policy=RunPolicy(...)``. Use ``run_policy``.
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
    settings.data_path.mkdir(parents=True, exist_ok=True)
    return f"sqla+sqlite:///{settings.data_path / 'broker.sqlite'}"


@lru_cache
def get_settings() -> Settings:
    """Process-wide settings from the environment (cached; tests build their own ``Settings``)."""
    return Settings()
