"""Per-caller request rate limits: a token bucket per bearer token (per client address for
requests without one), a 429 with ``Retry-After`` when a caller runs dry.

So one user flooding the API (a script in a loop, valid or invalid bodies alike) spends its own
budget and not the other users' share of the API's threads and store. The operator sets it
(``AERO_RATE_LIMIT_PER_S``, ``AERO_RATE_LIMIT_BURST``; 0 = off, the single-user default of
`aero up`); a token holder cannot change it. The check runs before routing, authentication and
body parsing, and costs one hash and one dict lookup: a request refused here touches neither the
store nor a route thread. Buckets are per API process: with N processes (``backend.serve
--workers N``, one socket each, connections spread by the kernel) a caller gets up to N times
the rate. ``/api/health`` is never limited (probes).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import OrderedDict

from starlette.types import ASGIApp, Receive, Scope, Send

EXEMPT_PATHS = ("/api/health",)
MAX_CALLERS = 10_000  # buckets kept per process; the least recently seen is dropped first


class TokenBuckets:
    """``rate`` tokens per second up to ``burst`` per key; ``take(key)`` returns 0 when a request
    may go, else the seconds until it may."""

    def __init__(self, rate: float, burst: float, clock=time.monotonic):
        self.rate, self.burst, self.clock = float(rate), float(max(burst, 1.0)), clock
        self.buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def take(self, key: str) -> float:
        now = self.clock()
        tokens, at = self.buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        wait = 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate
        self.buckets[key] = (tokens - 1.0 if wait == 0.0 else tokens, now)
        if len(self.buckets) > MAX_CALLERS:
            self.buckets.popitem(last=False)
        return wait


def caller_key(scope: Scope) -> str:
    """The bearer token's digest (never the token itself), else the client address."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            return "t:" + hashlib.blake2b(value[7:].strip(), digest_size=12).hexdigest()
    client = scope.get("client")
    return "a:" + (client[0] if client else "unknown")


class RateLimit:
    """Pure ASGI middleware applying :class:`TokenBuckets` to every HTTP request (module docstring)."""

    def __init__(self, app: ASGIApp, rate: float, burst: float):
        self.app, self.buckets = app, TokenBuckets(rate, burst)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "") in EXEMPT_PATHS:
            await self.app(scope, receive, send)
            return
        wait = self.buckets.take(caller_key(scope))
        if wait == 0.0:
            await self.app(scope, receive, send)
            return
        retry = max(1, math.ceil(wait))
        body = json.dumps({"detail": f"too many requests from this caller: at most {self.buckets.rate:g} per second "
                                     f"(bursts of {self.buckets.burst:g}); retry in {retry} s"}).encode()
        await send({"type": "http.response.start", "status": 429,
                    "headers": [(b"content-type", b"application/json"), (b"retry-after", str(retry).encode()),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
