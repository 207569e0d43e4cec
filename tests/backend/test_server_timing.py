"""Server-Timing on every response (backend/api/server_timing.py): the API's own time, which the
soak (benchmarks/soak/) reports beside the latency its clients see."""

from __future__ import annotations

import asyncio

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from backend.api.server_timing import ServerTiming, app_ms


async def slow(request):
    await asyncio.sleep(0.05)
    return PlainTextResponse("ok")


async def stream(request):
    async def body():
        yield b"data: 1\n\n"
        await asyncio.sleep(0.2)  # after the headers: not in the header's time
        yield b"data: 2\n\n"

    return StreamingResponse(body(), media_type="text/event-stream")


def test_the_header_times_the_application_not_the_stream_after_its_headers():
    app = ServerTiming(Starlette(routes=[Route("/slow", slow), Route("/stream", stream)]))
    with TestClient(app) as c:
        r = c.get("/slow")
        assert r.text == "ok"
        assert 50.0 <= app_ms(r.headers["server-timing"]) < 1000.0
        s = c.get("/stream")
        assert s.text == "data: 1\n\ndata: 2\n\n"  # the stream is passed through whole
        assert app_ms(s.headers["server-timing"]) < 200.0


def test_the_api_sends_it_on_every_answer_errors_included(client, auth):
    for r in (client.get("/api/health"), client.get("/api/runs/999999", headers=auth), client.get("/api/runs")):
        assert app_ms(r.headers.get("server-timing")) is not None, (r.status_code, dict(r.headers))


def test_parsing_the_header():
    assert app_ms("app;dur=12.5") == 12.5
    assert app_ms("db;dur=3, app;desc=\"x\";dur=7") == 7.0
    assert app_ms(None) is None and app_ms("db;dur=3") is None and app_ms("app;dur=x") is None
