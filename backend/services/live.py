"""Wake live streams when a run changes, instead of at their next poll.

On PostgreSQL one listener per API process holds a ``LISTEN aero_runs`` connection (psycopg,
async, autocommit) and sets the event of every stream subscribed to the run a notice names
(``backend/db/notify.py`` sends them with each step, status and progress write). A stream
still polls the store every ``AERO_SSE_POLL_S``, so a lost notice or a dropped listener
connection costs latency, never data. SQLite has no notices: there one watcher per API process
reads ``PRAGMA data_version`` (it changes when another connection commits) every
``SQLITE_WATCH_S`` and wakes every stream, each of which then reads its run. The listener
starts with the first subscription, reconnects after errors and stops when the last stream ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import make_url

from backend.db.notify import CHANNEL

log = logging.getLogger(__name__)

RECONNECT_S = 2.0
SQLITE_WATCH_S = 0.05  # one PRAGMA per tick per API process, not per stream
IDLE_CHECK_S = 1.0  # how often a quiet listener looks whether any stream is left


def libpq_dsn(database_url: str) -> str | None:
    """The libpq connection string of a PostgreSQL SQLAlchemy URL (None for any other store)."""
    url = make_url(database_url)
    if url.get_backend_name() != "postgresql":
        return None
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def sqlite_file(database_url: str) -> str | None:
    """The file of a SQLite SQLAlchemy URL (None for any other store, or an in-memory one)."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return url.database


class RunChangeListener:
    """Per-run wake-ups from PostgreSQL notices (on SQLite: every stream, on any commit).
    ``subscribe(run_id)`` yields an event the listener sets on each notice for that run; the
    stream clears it before reading the store, so a change committed during the read wakes the
    next wait at once. The listener runs while any stream is subscribed."""

    def __init__(self, database_url: str):
        self.dsn, self.sqlite_path = libpq_dsn(database_url), sqlite_file(database_url)
        self.events: dict[int, set[asyncio.Event]] = defaultdict(set)
        self.task: asyncio.Task | None = None

    @contextmanager
    def subscribe(self, run_id: int) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        self.events[run_id].add(event)
        loop = asyncio.get_running_loop()
        # (re)start on this loop: a test client runs each request in a loop of its own
        watch = self._listen if self.dsn is not None else self._watch_sqlite if self.sqlite_path is not None else None
        if watch is not None and (self.task is None or self.task.done() or self.task.get_loop() is not loop):
            self.task = loop.create_task(watch(), name="aero-run-listener")
        try:
            yield event
        finally:
            self.events[run_id].discard(event)
            if not self.events[run_id]:
                del self.events[run_id]

    def wake_all(self) -> None:
        for events in list(self.events.values()):
            for event in events:
                event.set()

    def dispatch(self, payload: str) -> None:
        if payload.isdigit():
            for event in self.events.get(int(payload), ()):
                event.set()

    async def _listen(self) -> None:
        import psycopg  # the PostgreSQL driver the store already uses

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self.wake_all()  # changes while disconnected: look again
                    while self.events:  # the last stream gone: hang up (the next one reconnects)
                        async for notice in conn.notifies(timeout=IDLE_CHECK_S):
                            self.dispatch(notice.payload)
            except (psycopg.Error, OSError) as e:  # the streams keep polling meanwhile
                log.warning("run-change listener: %s; reconnecting in %.0f s", e, RECONNECT_S)
                await asyncio.sleep(RECONNECT_S)
                continue
            if not self.events:  # checked after the close: a stream that came during it keeps us
                return

    async def _watch_sqlite(self) -> None:
        import sqlite3

        assert self.sqlite_path is not None
        while True:
            try:
                conn = sqlite3.connect(self.sqlite_path, check_same_thread=False)
                try:
                    last = None
                    while self.events:
                        version = await asyncio.to_thread(lambda: conn.execute("PRAGMA data_version").fetchone()[0])
                        if last is not None and version != last:
                            self.wake_all()
                        last = version
                        await asyncio.sleep(SQLITE_WATCH_S)
                finally:
                    conn.close()
            except sqlite3.Error as e:  # the streams keep polling meanwhile
                log.warning("run-change watcher: %s; retrying in %.0f s", e, RECONNECT_S)
                await asyncio.sleep(RECONNECT_S)
                continue
            if not self.events:
                return

    async def close(self) -> None:
        if self.task is not None and self.task.get_loop() is asyncio.get_running_loop():
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        self.task = None


async def wait_for_change(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until ``event`` is set or ``timeout_s`` passes; True when it was set."""
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
        return True
    except TimeoutError:
        return False
