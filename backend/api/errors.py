"""Error mapping: domain exceptions -> HTTP, and the request body size limit.

* ConfigError -> 422 with pydantic-style detail items whose ``loc`` names the field
  (``["body", "config", "aero", "n_explore"]``).
* QuotaExceeded -> 429 with ``detail`` (one sentence naming the limit and the usage) and
  ``quota`` (limit, max, usage, requested, user).
* RunNotFound / SweepNotFound -> 404; RunConflict / SweepConflict -> 409; EnqueueError /
  SweepEnqueueError -> 503.
* Bodies over ``max_body_bytes`` -> 413 (by Content-Length, or while streaming a chunked body).
* The store unreachable (SQLAlchemy OperationalError / InterfaceError / pool timeout) -> 503,
  as ``/api/health`` says.
* Query strings with NUL characters -> 422 naming the parameter (PostgreSQL refuses NUL).
* 422 bodies echo the offending input JSON-safe: NaN / Infinity as strings, lone surrogates
  escaped, bytes decoded, deep or long values cut (``json_safe``).
"""

from __future__ import annotations

import math
import typing
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.db.runs import RunConflict, RunNotFound
from backend.db.sweeps import SweepConflict, SweepNotFound
from backend.services.quotas import QuotaExceeded
from backend.services.submit import EnqueueError
from backend.services.sweep_submit import SweepEnqueueError
from trainer.spec.config import ConfigError, RunConfig, operator_field_message

NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "Unknown id."}}
FORBIDDEN: dict[int | str, dict[str, Any]] = {403: {"description": "The token's role may not do this (a viewer "
                                                    "writes nothing; a member changes only their own runs and sweeps)."}}
QUOTA: dict[int | str, dict[str, Any]] = {429: {"description": "Over one of the caller's quotas; the answer names "
                                                "the limit and the current usage, and nothing was stored."}}


def conflict_responses(why: str) -> dict[int | str, dict[str, Any]]:
    return {**NOT_FOUND, 409: {"description": f"Conflict: {why}."}}


def _loc_part(p: str) -> str | int:
    return int(p) if p.isdigit() else p


def config_validation_error(err: ConfigError, prefix: Sequence[str | int]) -> RequestValidationError:
    """A ConfigError as FastAPI's 422: one detail item per issue, ``loc`` = prefix + dotted path."""
    items = []
    for path, msg in err.issues:
        loc = [*prefix, *(_loc_part(p) for p in path.split("."))] if path != "config" else list(prefix)
        items.append({"type": "config_error", "loc": loc, "msg": f"{'.'.join(map(str, loc[len(prefix):])) or 'config'}: {msg}", "input": None})
    return RequestValidationError(items)


def _field(path: Sequence[str | int]):
    """(model owning the last part, its FieldInfo or None) for a RunConfig path."""
    model, info = RunConfig, None
    for i, part in enumerate(path):
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            return (model if i == len(path) - 1 and fields else None), None
        info = fields[part]
        if i < len(path) - 1:  # a method section is ``Model | None``: walk into the model
            model = next((a for a in (typing.get_args(info.annotation) or (info.annotation,))
                          if hasattr(a, "model_fields")), None)
    return model, info


def field_hint(path: Sequence[str | int], error_type: str = "") -> str | None:
    """What to do about a bad RunConfig field: its meaning and default, or for an unknown
    field the valid names. None when the path is not a RunConfig field."""
    model, info = _field(path)
    name = ".".join(map(str, path))
    if error_type == "extra_forbidden" and (operator := operator_field_message(path)):
        return f"{name}: {operator}"
    if error_type == "extra_forbidden" and model is not None:
        return f"unknown field {name!r}: remove it or fix its spelling (valid here: {', '.join(model.model_fields)})"
    if info is None or not info.description:
        return None
    default = "" if info.is_required() or info.default_factory is not None else f"; default {info.default!r}"
    return f"{name}: {info.description.rstrip('.')}{default}"


ECHO_DEPTH, ECHO_ITEMS, ECHO_CHARS = 4, 20, 200


def json_safe(value: Any, depth: int = 0) -> Any:
    """``value`` as something JSON (RFC 8259, UTF-8) can carry, for echoing input in a 422:
    non-finite floats as "NaN" / "Infinity" / "-Infinity", strings with lone surrogates
    escaped (``\\ud800``), bytes decoded, containers cut at ECHO_DEPTH levels and ECHO_ITEMS
    items, strings at ECHO_CHARS characters, anything else by its repr."""
    if value is None or isinstance(value, (bool, int)):
        return value if not isinstance(value, int) or -(2**63) <= value < 2**63 else str(value)[:ECHO_CHARS]
    if isinstance(value, float):
        return value if math.isfinite(value) else ("NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity"))
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")[:ECHO_CHARS]
    if isinstance(value, dict | list | tuple | set | frozenset):
        if depth >= ECHO_DEPTH:
            return "..."
        if isinstance(value, dict):
            return {json_safe(str(k)): json_safe(v, depth + 1) for k, v in list(value.items())[:ECHO_ITEMS]}
        return [json_safe(v, depth + 1) for v in list(value)[:ECHO_ITEMS]]
    return json_safe(repr(value))


def _safe_error(err: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in err.items() if k not in ("input", "ctx", "url")}
    out["loc"] = [p if isinstance(p, int) else json_safe(str(p)) for p in err.get("loc", ())]
    out["msg"] = str(err.get("msg", "")).encode("utf-8", "backslashreplace").decode("utf-8")  # never cut
    out["input"] = json_safe(err.get("input"))
    if "ctx" in err:
        out["ctx"] = {str(k): json_safe(v if isinstance(v, (int, float, str)) else str(v)) for k, v in err["ctx"].items()}
    return out


async def validation_error_handler(_: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 body, with a hint naming the config field, what it means and its default."""
    errors = []
    for err in exc.errors():
        err = dict(err)
        loc = list(err.get("loc", ()))
        in_config = len(loc) > 2 and loc[0] == "body" and loc[1] in ("config", "base")
        if not in_config and err.get("type") == "value_error" and str(err.get("msg", "")).startswith("Value error, "):
            where = ".".join(map(str, loc[1:])) or "body"  # "overrides.1: nested deeper than 8 levels"
            err["msg"] = f"{where}: {err['msg'][len('Value error, '):]}"
        elif in_config and err.get("type") != "config_error":
            hint = field_hint(loc[2:], err.get("type", ""))
            if hint:
                err["msg"] = f"{err['msg']}. {hint}"
        errors.append(_safe_error(err))
    return JSONResponse({"detail": errors}, status_code=422)


STORE_DOWN = (OperationalError, InterfaceError, PoolTimeout)


async def store_unreachable(_: Request, exc: Exception) -> JSONResponse:
    """Any route while the store is down: 503, as /api/health (no stack trace, no SQL)."""
    return JSONResponse({"detail": f"store unreachable: {type(exc).__name__}; try again shortly"}, status_code=503,
                        headers={"Retry-After": "5"})


def install_error_handlers(app: FastAPI) -> None:
    def detail(status: int):
        async def handler(_: Request, exc: Exception) -> JSONResponse:
            return JSONResponse({"detail": str(exc)}, status_code=status)
        return handler

    app.add_exception_handler(RunNotFound, detail(404))
    app.add_exception_handler(SweepNotFound, detail(404))
    app.add_exception_handler(RunConflict, detail(409))
    app.add_exception_handler(EnqueueError, detail(503))
    app.add_exception_handler(SweepConflict, detail(409))
    app.add_exception_handler(SweepEnqueueError, detail(503))

    async def quota_exceeded(_: Request, exc: QuotaExceeded) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "quota": exc.body()}, status_code=429)

    app.add_exception_handler(QuotaExceeded, quota_exceeded)

    async def bare_config_error(_: Request, exc: ConfigError) -> JSONResponse:  # a route forgot its prefix
        return JSONResponse({"detail": config_validation_error(exc, ["body"]).errors()}, status_code=422)

    app.add_exception_handler(ConfigError, bare_config_error)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    for exc_type in STORE_DOWN:
        app.add_exception_handler(exc_type, store_unreachable)


class QueryNulGuard:
    """Pure ASGI middleware: 422 naming the parameter for a query string with a NUL character
    (``%00``), before any route can hand it to PostgreSQL (which refuses NUL in text)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and b"%00" in scope.get("query_string", b"").upper():
            pairs = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
            bad = next((k for k, v in pairs if "\x00" in k or "\x00" in v), None)
            if bad is not None:
                name = json_safe(bad.replace("\x00", "\\u0000"))
                resp = JSONResponse({"detail": [{"type": "string_pattern_mismatch", "loc": ["query", name],
                                                 "msg": f"{name}: must not contain NUL (\\u0000) characters", "input": None}]},
                                    status_code=422)
                await resp(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _TooLarge(HTTPException):
    """Raised while a chunked body is being read: FastAPI renders it as 413."""

    def __init__(self, max_bytes: int):
        super().__init__(413, f"request body larger than {max_bytes} bytes")


class BodySizeLimit:
    """Pure ASGI middleware: 413 for request bodies larger than ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await self._reject(send)
            return
        seen, started = 0, False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._reject(send)

    async def _reject(self, send: Send) -> None:
        body = f'{{"detail":"request body larger than {self.max_bytes} bytes"}}'.encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
