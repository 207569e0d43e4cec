"""The FastAPI app. ``uvicorn backend.main:app`` (settings from the environment), or
``create_app(settings)`` for an app on another store / queue (tests, benchmarks).

Routes live under ``/api``; OpenAPI at ``/docs`` (``/openapi.json``); Prometheus at ``/metrics``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI

from backend.api.errors import BodySizeLimit, QueryNulGuard, install_error_handlers
from backend.api.rate_limit import RateLimit
from backend.api.server_timing import ServerTiming
from backend.api.routes import access, compare, health, methods, metrics, rollouts, run_actions, runs, sweeps
from backend.db.migrate import migrate
from backend.db.session import get_engine, make_sessionmaker
from backend.queue import Enqueuer, celery_enqueuer
from backend.services.cache import ByteLRU
from backend.services.live import RunChangeListener
from backend.settings import Settings, ensure_data_dir, get_settings

API_PREFIX = "/api"


def create_app(settings: Settings | None = None, *, enqueue: Enqueuer | None = None) -> FastAPI:
    """Build the app. ``enqueue(run_id, queue)`` defaults to sending the Celery task by name."""
    settings = settings or get_settings()
    if settings.database_url.startswith("sqlite") or not settings.redis_url:
        ensure_data_dir(settings)  # 0700, the store/broker/token files in it 0600

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.migrate_on_start:
            migrate(settings.database_url)
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.api_threads
        yield
        await app.state.run_changes.close()

    app = FastAPI(
        title="AERO Lab API",
        version="0.1.0",
        description="Submit, watch and compare GRPO, DAPO and AERO training runs. State-changing calls need "
        "`Authorization: Bearer <token>` (`aero token create NAME --role admin|member|viewer`): admins may do "
        "everything, members submit and change their own runs and sweeps, viewers only read.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.sessionmaker = make_sessionmaker(get_engine(settings.database_url))
    app.state.enqueue = enqueue or celery_enqueuer(settings)
    app.state.run_changes = RunChangeListener(settings.database_url)  # wakes SSE streams when their run changes
    app.state.metrics_cache = ByteLRU(int(settings.metrics_cache_mb * 2**20)) if settings.metrics_cache_mb > 0 else None
    install_error_handlers(app)
    for router in (runs.router, run_actions.router, metrics.router, sweeps.router, compare.router, methods.router, health.router,
                   health.metrics_router, access.router, rollouts.router):
        app.include_router(router, prefix=API_PREFIX)
    app.include_router(health.metrics_router)  # Prometheus' conventional /metrics
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(QueryNulGuard)
    if settings.rate_limit_per_s > 0:  # outermost: a flooding caller is refused before anything else runs
        app.add_middleware(RateLimit, rate=settings.rate_limit_per_s,
                           burst=settings.rate_limit_burst or 2 * settings.rate_limit_per_s)
    app.add_middleware(ServerTiming)  # outermost: the time includes the limiter's and the body cap's
    return app


def __getattr__(name: str):
    # `backend.main:app` is built on first access, so importing this module has no side effects.
    if name == "app":
        globals()["app"] = create_app()
        return globals()["app"]
    raise AttributeError(name)
