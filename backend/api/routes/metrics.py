"""/api/runs/{id}/metrics, /metrics/stream, /evals, /export: a run's measurements."""

from __future__ import annotations

from typing import Annotated, Literal

import anyio
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from sse_starlette import EventSourceResponse, ServerSentEvent

from backend.api.deps import ReadAccess, SessionDep, SettingsDep, get_sessionmaker
from backend.api.errors import NOT_FOUND
from backend.api.routes.runs import RunId
from backend.db import metrics as store
from backend.db.models import FINISHED_STATUSES
from backend.db.runs import get_run
from backend.schemas import EvalPublic, EvalsPublic, MetricsPublic
from backend.services import export
from backend.services.live import wait_for_change
from backend.services.metric_reads import MAX_METRIC_KEYS, TooManyKeys, dumps, metrics_body, poll_new_steps
from backend.services.metric_reads import parse_keys as _parse_keys

router = APIRouter(prefix="/runs", tags=["metrics"], dependencies=[ReadAccess])

Keys = Annotated[list[str] | None, Query(max_length=256, description=f"Metric keys, comma-separated and/or repeated; default: all. "
                                          f"At most {MAX_METRIC_KEYS} distinct keys.")]
Step = Annotated[int | None, Query(ge=-1, le=2**31 - 1, description="Only steps after this one (exclusive).")]


def parse_keys(raw: list[str] | None) -> list[str] | None:
    """The requested keys, or 422 on ``keys`` when there are too many."""
    try:
        return _parse_keys(raw)
    except TooManyKeys as e:
        raise RequestValidationError([{"type": "too_long", "loc": ["query", "keys"], "msg": f"keys: {e}", "input": None}]) from None


def _dumps(obj) -> str:
    return dumps(obj).decode()


@router.get("/{run_id}/metrics", response_model=MetricsPublic, responses=NOT_FOUND)
def get_metrics(
    run_id: RunId,
    request: Request,
    session: SessionDep,
    keys: Keys = None,
    since_step: Step = None,
    every: Annotated[int, Query(ge=1, le=1_000_000, description="Keep every k-th stored step (by position).")] = 1,
    max_points: Annotated[int, Query(ge=1, le=100_000, description="Then decimate to at most this many points.")] = 5000,
    if_none_match: Annotated[str | None, Header(include_in_schema=False)] = None,
):
    """Columnar step metrics, downsampled server-side (decimation; the last step is always kept).
    Sends an ETag; ``If-None-Match`` with it answers 304 until the run changes."""
    etag, body = metrics_body(session, run_id, parse_keys(keys), since_step, every, max_points, request.app.state.metrics_cache)
    if if_none_match is not None and etag in [t.strip() for t in if_none_match.split(",")]:
        return Response(status_code=304, headers={"ETag": etag})
    return Response(body, media_type="application/json", headers={"ETag": etag})  # no re-validation of thousands of floats


@router.get("/{run_id}/metrics/stream", responses={**NOT_FOUND, 200: {"content": {"text/event-stream": {}},
            "description": "Events: `metrics` (id = step, data = {step, metrics}), `status` on each status or "
                           "progress change, `end` once the run has finished and every step was sent."}})
async def stream_metrics(
    run_id: RunId,
    request: Request,
    settings: SettingsDep,
    keys: Keys = None,
    since_step: Step = None,
    last_event_id: Annotated[str | None, Header(include_in_schema=False)] = None,
    poll_s: Annotated[float | None, Query(gt=0, le=60, description="Store polling interval, a fallback: the store's change signal "
                                                             "wakes the stream at once; default AERO_SSE_POLL_S.")] = None,
):
    """Server-sent events with new steps as they land; ends when the run has finished. The stream
    wakes on the store's change signal (PostgreSQL LISTEN/NOTIFY; SQLite's data_version, watched)
    and also polls every ``poll_s``. Reconnecting clients resume after their ``Last-Event-ID``."""
    factory = get_sessionmaker(request)
    wanted = parse_keys(keys)
    after = since_step
    if after is None and last_event_id and last_event_id.strip().isdigit():
        after = int(last_event_id.strip())
    interval = poll_s or settings.sse_poll_s

    def poll(after_step):
        with factory() as s:
            return poll_new_steps(s, run_id, after_step, wanted)

    first = await anyio.to_thread.run_sync(poll, after)  # 404 before the stream starts

    async def events():
        nonlocal after
        result, last_info = first, None
        with request.app.state.run_changes.subscribe(run_id) as changed:
            while True:
                status, info, rows = result
                for step, metrics in rows:
                    yield ServerSentEvent(data=_dumps({"step": step, "metrics": metrics}), event="metrics", id=str(step))
                    after = step
                if info != last_info:
                    yield ServerSentEvent(data=_dumps(info), event="status")
                    last_info = info
                if status in FINISHED_STATUSES:
                    yield ServerSentEvent(data=_dumps({"status": status, "last_step": after}), event="end")
                    return
                await wait_for_change(changed, interval)  # the store's change signal, or the poll interval
                if await request.is_disconnected():
                    return
                changed.clear()  # before the read: a change committed during it wakes the next wait
                result = await anyio.to_thread.run_sync(poll, after)

    return EventSourceResponse(events(), ping=15)


@router.get("/{run_id}/evals", response_model=EvalsPublic, responses=NOT_FOUND)
def get_evals(
    run_id: RunId,
    session: SessionDep,
    benchmark: Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00]*$")] = None,
    step: Annotated[int | None, Query(ge=0, le=2**31 - 1)] = None,
    per_problem: bool = True,
):
    """Evaluation results (Avg@k, Pass@k with CIs; per-problem (n, c) unless per_problem=false)."""
    get_run(session, run_id)
    rows = store.list_evals(session, run_id, benchmark, step)
    data = [
        EvalPublic(run_id=e.run_id, step=e.step, benchmark=e.benchmark, n=e.n, k=e.k, avg_at_k=e.avg_at_k, pass_at_k=e.pass_at_k,
                   avg_ci=[e.avg_ci_lo, e.avg_ci_hi], pass_ci=[e.pass_ci_lo, e.pass_ci_hi],
                   per_problem=e.per_problem if per_problem else None)
        for e in rows
    ]
    return EvalsPublic(data=data, count=len(data))


@router.get("/{run_id}/export", responses={**NOT_FOUND, 200: {"content": {"text/csv": {}, "application/vnd.apache.parquet": {}},
                                                               "description": "One row per step, one column per metric key."}})
def export_metrics(run_id: RunId, session: SessionDep, format_: Annotated[Literal["csv", "parquet"], Query(alias="format")] = "csv"):
    """Download every step metric of a run as CSV or Parquet."""
    get_run(session, run_id)
    cols = store.read_step_metrics(session, run_id)
    if format_ == "parquet":
        body, media = export.to_parquet(cols), "application/vnd.apache.parquet"
    else:
        body, media = export.to_csv(cols).encode(), "text/csv; charset=utf-8"
    return Response(body, media_type=media, headers={"Content-Disposition": f'attachment; filename="run-{run_id}.{format_}"'})
