"""How an `aero` command fails: an operator's mistake (a store or broker it cannot reach, a
missing or unwritable file, a port in use, a malformed URL, a bad setting) is told in one or two
lines, what failed and then what to do, with exit status 1; never a traceback. ``AERO_DEBUG=1``
(or ``aero --debug COMMAND``) shows the full traceback instead.

One place does it: :class:`AeroTyper` (the `aero` app, cli/main.py) catches what a command
raises and :func:`explain` maps the exception's class to the message, so commands raise and do
not catch. A command that knows better context raises :class:`OperatorError` itself, as the
pre-flight checks here do (:func:`check_port`, :func:`check_store`, :func:`check_broker`): a
command that starts a long-running service runs them first, so it fails at once rather than
retrying for ever or after minutes of work.

Classes are matched by name along the exception's MRO, so this module imports neither
SQLAlchemy, kombu, redis nor httpx (a command that never touches them does not load them).
URLs are shown with their password masked, in the messages of the libraries too."""

from __future__ import annotations

import errno
import os
import re
import socket
from pathlib import Path
from typing import Any

import typer

DEBUG_ENV = "AERO_DEBUG"
DEBUG_HINT = "rerun with AERO_DEBUG=1 (or aero --debug ...) for the full traceback"

# the store and broker URLs a command works on, when they are not the environment's
# (aero backup --database-url), for the messages
_using: dict[str, str] = {}


class OperatorError(Exception):
    """A mistake the operator can fix: ``what`` failed, ``hint`` says what to do. Printed in
    two lines with exit status 1 (no traceback unless debugging)."""

    def __init__(self, what: str, hint: str = "") -> None:
        super().__init__(what)
        self.what, self.hint = what, hint


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")


_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@")


def mask(text: Any) -> str:
    """``text`` with the password of every URL in it replaced by ``***``."""
    return _URL_PASSWORD.sub(r"\1***@", str(text))


def using_store(url: str, option: str = "") -> str:
    """Note ``url`` as the store this command works on (for the messages), and the command's
    ``option`` that sets it; returns ``url``."""
    _using.update(store=url, store_option=option)
    return url


def store_url() -> str:
    """The store the failing command was using: noted by :func:`using_store`, else the settings'."""
    if "store" in _using:
        return _using["store"]
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    return f"sqlite:///{data_dir() / 'aero.sqlite'}"


def store_hint() -> str:
    option = f" (or {_using['store_option']})" if _using.get("store_option") else ""
    return f"Set DATABASE_URL{option} to the store's URL, e.g. postgresql://USER:PASSWORD@HOST:5432/DB or sqlite:////PATH/aero.sqlite"


def data_dir() -> Path:
    return Path(os.environ.get("AERO_DATA_DIR") or "aero-data").expanduser().resolve()


def _names(exc: BaseException) -> set[str]:
    return {f"{c.__module__}.{c.__qualname__}" for c in type(exc).__mro__}


def _is(exc: BaseException, *names: str) -> bool:
    return not _names(exc).isdisjoint(names)


def _first_line(text: Any) -> str:
    """The first line of a library's message, without an "[Errno 111] " prefix."""
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return re.sub(r"^\[Errno -?\d+\]\s*", "", lines[0]) if lines else ""


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text[1:2].islower() or len(text) == 1 else text


# ---------------------------------------------------------------- the mapping


def _path_hint(path: str | None) -> str:
    """Which setting names ``path``, when it is the platform's."""
    if not path:
        return ""
    p = Path(path).expanduser().resolve()
    data = data_dir()
    if p == data or data in p.parents or p in data.parents:
        return " It is the data directory (AERO_DATA_DIR): point AERO_DATA_DIR at one you can write."
    if store_url().startswith("sqlite") and str(p) in store_url():
        return " It is the store (DATABASE_URL): point DATABASE_URL at a file you can write."
    return ""


def _os_error(exc: OSError) -> tuple[str, str]:
    path = exc.filename if isinstance(exc.filename, (str, os.PathLike)) else None
    where = f"{os.fspath(path)}: " if path is not None else ""
    why = _lower_first(exc.strerror or str(exc))
    hint = _path_hint(os.fspath(path) if path is not None else None)
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve a host name: {why}", "Check the host in the URL or --host option."
    if exc.errno == errno.EADDRINUSE:
        return "address already in use", "Stop what listens on that port, or choose another port."
    if isinstance(exc, FileNotFoundError):
        # raised without a filename (``FileNotFoundError("no x.json in DIR")``): its own words name the path
        what = f"{where}no such file or directory" if path is not None or exc.strerror else _lower_first(str(exc))
        return what, "Check the path." + hint
    if isinstance(exc, PermissionError):
        shown = f" (ls -ld {Path(os.fspath(path)).parent})" if path is not None else ""
        return f"{where}{why}", f"Check its owner and mode{shown}, or use a path this user can write." + hint
    if isinstance(exc, IsADirectoryError):
        return f"{where}is a directory, not a file", "Give the path of a file."
    if isinstance(exc, NotADirectoryError):
        return f"{where}a part of the path is a file, not a directory", "Check the path." + hint
    if exc.errno == errno.ENOSPC:
        return f"{where}no space left on the device", "Free some space, or write somewhere else." + hint
    if isinstance(exc, ConnectionError):
        return f"connection failed: {why}", "Check that the server is running and the address is right."
    return f"{where}{why}", "Check the path and the system's state." + hint


def _sqlalchemy(exc: BaseException) -> tuple[str, str] | None:
    url = mask(store_url())
    if _is(exc, "sqlalchemy.exc.NoSuchModuleError"):
        return f"the store URL {url} names a database driver SQLAlchemy does not know ({str(exc).split(':')[-1]})", store_hint() + "."
    if _is(exc, "sqlalchemy.exc.ArgumentError") and "URL" in str(exc):
        return f"the store URL {url} is not a database URL ({_lower_first(_first_line(exc))})", store_hint() + "."
    if _is(exc, "sqlalchemy.exc.DBAPIError", "psycopg.Error", "sqlite3.Error"):
        orig = getattr(exc, "orig", None) or exc
        why = _lower_first(_first_line(orig).removeprefix("connection failed: "))
        if (url.startswith("sqlite") or _is(exc, "sqlite3.Error")) and "unable to open" in why:
            return (f"cannot open the SQLite store at {url}: {why}",
                    "Check that the file's directory exists and this user can write it; set AERO_DATA_DIR or DATABASE_URL.")
        if url.startswith("sqlite") or _is(exc, "sqlite3.Error"):
            return f"the SQLite store at {url} failed: {why}", "Check the file (and that no other process holds it locked)."
        if "does not exist" in why:
            return f"cannot open the store at {url}: {why}", "Create it (createdb NAME). " + store_hint() + "."
        if "password" in why or "authentication" in why:
            return f"cannot log in to the store at {url}: {why}", "Check the user and password in the URL. " + store_hint() + "."
        if "connect" in why or "connection" in str(orig).lower()[:80]:
            return f"cannot reach the store at {url}: {why}", "Is PostgreSQL running there? " + store_hint() + "."
        return f"the store at {url} refused: {why}", "Check the database's state and this user's rights on it."
    return None


def _broker(exc: BaseException) -> tuple[str, str] | None:
    if not _is(exc, "kombu.exceptions.OperationalError", "redis.exceptions.ConnectionError", "redis.exceptions.TimeoutError"):
        return None
    url = mask(_using.get("broker") or os.environ.get("REDIS_URL") or "the broker")
    return (f"cannot reach the broker at {url}: {_lower_first(_first_line(exc))}",
            "Is Redis running there? Set REDIS_URL to its URL (unset: the embedded SQLite broker).")


def _http(exc: BaseException) -> tuple[str, str] | None:
    if _is(exc, "httpx.InvalidURL"):
        return f"not a valid API URL: {_first_line(exc)}", "Give --api (or AERO_API_URL) as http://HOST:PORT."
    if not _is(exc, "httpx.HTTPError"):
        return None
    http: Any = exc
    try:
        url = mask(str(http.request.url).split("/api/")[0])  # the base, as --api gives it
    except (AttributeError, RuntimeError):  # no request attached
        url = "the API"
    if _is(exc, "httpx.UnsupportedProtocol"):
        return f"not an API URL: {url}", "Give --api (or AERO_API_URL) as http://HOST:PORT, e.g. http://127.0.0.1:8000."
    if _is(exc, "httpx.HTTPStatusError"):
        return f"the API answered {http.response.status_code} for {url}", "Check the URL and your token (--token / AERO_API_TOKEN)."
    return (f"cannot reach the API at {url}: {_lower_first(_first_line(exc)) or type(exc).__name__}",
            "Is `aero up` (or the API) running there? Set --api / AERO_API_URL.")


def _validation(exc: BaseException) -> tuple[str, str] | None:
    if not _is(exc, "pydantic_core._pydantic_core.ValidationError"):
        return None
    invalid: Any = exc
    errors = invalid.errors()
    title = getattr(exc, "title", "settings")
    names: dict[str, str] = {}
    if title == "RunPolicy":
        from trainer.spec.operator_policy import ENV

        names = ENV
    shown = []
    for e in errors[:2]:
        loc = ".".join(str(x) for x in e.get("loc", ()))
        shown.append(f"{names.get(loc, loc) or title}: {e.get('msg')} (got {mask(repr(e.get('input')))[:80]})")
    more = f" (and {len(errors) - 2} more)" if len(errors) > 2 else ""
    label = {"Settings": "platform setting", "WorkerSettings": "worker setting", "RunPolicy": "run policy setting"}.get(title, title)
    return (f"invalid {label}: " + "; ".join(shown) + more,
            "Fix the setting (an environment variable: DATABASE_URL, AERO_*; docs/deploy.md lists them).")


def explain(exc: BaseException) -> tuple[str, str] | None:
    """(what failed, what to do) for a mistake the operator can fix; None for anything else."""
    if isinstance(exc, OperatorError):
        return exc.what, exc.hint
    for mapper in (_sqlalchemy, _broker, _http, _validation):
        found = mapper(exc)
        if found:
            return found
    if _is(exc, "json.decoder.JSONDecodeError"):
        return f"not valid JSON: {exc}", "Fix the file (or the value) it was read from."
    if _is(exc, "trainer.spec.config.ConfigError"):
        issues = "; ".join(f"{loc}: {msg}" for loc, msg in getattr(exc, "issues", [])[:3]) or str(exc)
        return f"invalid run config: {issues}", "Fix the field (aero train --help lists the flags; --set key=value overrides)."
    if _is(exc, "trainer.platform.placement.NodeLost"):
        return (f"a node of the run's Ray cluster was lost: {_first_line(exc)}",
                "Bring the node back (or let the cluster replace it), then run the same command again: it resumes from "
                "the last checkpoint. Through the platform, a worker retries it (AERO_MAX_ATTEMPTS).")
    if _is(exc, "trainer.platform.placement.PlacementError"):
        return f"the run cannot be placed: {_first_line(exc)}", "Fix the cluster or the setting it names, then run it again."
    if isinstance(exc, OSError):
        return _os_error(exc)
    return None


def report(exc: BaseException) -> None:
    """Print what failed and what to do (stderr), one line each, URLs' passwords masked."""
    from rich.markup import escape

    from cli.consoles import err

    found = explain(exc)
    if found is None:
        what, hint = f"unexpected error: {type(exc).__name__}: {_first_line(exc)}", DEBUG_HINT + "; if it is a bug, report it."
    else:
        what, hint = found
    err.print(f"[red]{escape(mask(what))}[/]", soft_wrap=True, highlight=False)  # the hints are ours: no URL to mask
    if hint:
        err.print(escape(hint), soft_wrap=True, highlight=False)


class AeroTyper(typer.Typer):
    """The `aero` app: a command's exception is reported by :func:`report` (exit 1), unless
    debugging, when it propagates with its (Rich) traceback."""

    def enable_debug(self) -> None:
        os.environ[DEBUG_ENV] = "1"  # the children `aero up` starts inherit it
        self.pretty_exceptions_enable = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.pretty_exceptions_enable = debug_enabled()
        try:
            return super().__call__(*args, **kwargs)
        except Exception as e:  # noqa: BLE001  (every error is reported; AERO_DEBUG re-raises it)
            if debug_enabled():
                raise
            report(e)
            raise SystemExit(1) from None


# ---------------------------------------------------------------- pre-flight checks


def check_port(host: str, port: int, option: str) -> None:
    """Fail unless ``host:port`` can be listened on (what uvicorn or streamlit would do next)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise OperatorError(f"cannot listen on {host}: {_lower_first(e.strerror or str(e))}",
                            "Give --host as an address of this machine, e.g. 127.0.0.1 or 0.0.0.0.") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a port in TIME_WAIT is free
        try:
            s.bind(addr)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise OperatorError(f"port {port} on {host} is in use ({option})",
                                    f"Stop what listens there (ss -ltnp 'sport = :{port}') or pass {option} with a free port.") from None
            raise OperatorError(f"cannot listen on {host}:{port} ({option}): {_lower_first(e.strerror or str(e))}",
                                "Give --host as an address of this machine, e.g. 127.0.0.1 or 0.0.0.0.") from None


def check_store(url: str) -> None:
    """Connect to the store once (a connection error is reported by :func:`explain`)."""
    from sqlalchemy import text

    from backend.db.session import get_engine

    using_store(url)
    with get_engine(url).connect() as conn:
        conn.execute(text("SELECT 1"))


def check_broker(url: str, timeout_s: float = 5.0) -> None:
    """Connect to the Celery broker once, without retrying (Celery itself retries for ever)."""
    from kombu import Connection

    _using["broker"] = url
    try:
        with Connection(url, connect_timeout=timeout_s) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=timeout_s)
    except KeyError as e:  # kombu: "No such transport: nope"
        raise OperatorError(f"the broker URL {mask(url)} names no transport Celery knows ({e.args[0]})",
                            "Set REDIS_URL to redis://HOST:6379/0 (or unset it for the embedded SQLite broker).") from None

