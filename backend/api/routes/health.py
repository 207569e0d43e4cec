"""/api/health and the Prometheus endpoint."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from backend.api.deps import ReadAccess, SessionDep, SettingsDep
from backend.schemas import HealthPublic
from backend.services import prometheus

router = APIRouter(tags=["health"])


@router.get("/health", response_model=HealthPublic, responses={503: {"description": "The store is unreachable."}})
def health(session: SessionDep, settings: SettingsDep):
    """Liveness plus a store round trip (never needs a token). ``broker`` names the transport only."""
    try:
        session.execute(text("SELECT 1"))
    except SQLAlchemyError as e:
        raise HTTPException(503, f"store unreachable: {type(e).__name__}") from None
    return HealthPublic(status="ok", database=session.get_bind().dialect.name,
                        broker="redis" if settings.redis_url else "sqlalchemy+sqlite (embedded)")


metrics_router = APIRouter(tags=["health"], dependencies=[ReadAccess])


@metrics_router.get("/metrics", response_class=Response,
                    responses={200: {"content": {prometheus.CONTENT_TYPE: {}}, "description": "Prometheus text format."}})
def prometheus_metrics(session: SessionDep):
    """Queue depth (runs queued), runs by status, running runs waiting for their GPUs, GPUs held
    per user, steps stored per second over the last minute."""
    return Response(prometheus.render(**prometheus.platform_gauges(session)), media_type=prometheus.CONTENT_TYPE)
