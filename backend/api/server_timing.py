"""``Server-Timing: app;dur=<ms>`` on every HTTP response (the W3C header browsers' developer
tools show): the time from the request reaching the application to its response headers, so a
slow answer can be told apart from a slow network or a busy client. Time a request waits in the
kernel or in uvicorn before the application sees it is not in it. For a stream (SSE) it is the
time to the stream's first byte."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ServerTiming:
    """Pure ASGI middleware (no response buffering, so streams pass through untouched)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                ms = (time.perf_counter() - t0) * 1000.0
                message = {**message, "headers": [*message.get("headers", ()), (b"server-timing", f"app;dur={ms:.1f}".encode())]}
            await send(message)

        await self.app(scope, receive, timed)


def app_ms(header: str | None) -> float | None:
    """The ``app`` duration of a Server-Timing header value, in milliseconds (None if absent)."""
    for part in (header or "").split(","):
        name, _, params = part.strip().partition(";")
        if name.strip() == "app":
            for p in params.split(";"):
                k, _, v = p.strip().partition("=")
                if k == "dur":
                    try:
                        return float(v)
                    except ValueError:
                        return None
    return None
