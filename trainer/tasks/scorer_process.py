"""Verifier subprocesses: the hard time limit for scorers that may hang inside C code.

Each worker is ``python -c "...serve()"`` talking length-prefixed pickles over its
stdin/stdout: the parent sends ``(fn, args)``, the worker answers ``(ok, value)``. Workers
persist between calls (one idle pool per ``preload`` tuple), so the start-up cost (an
interpreter plus the scorer's imports, ~1 s for math-verify) is paid once per run; a worker
that misses its deadline is SIGKILLed and replaced. A batch is spread over several
workers, which also uses the spare cores of a GPU box for math-verify.

``preload`` names what a fresh worker does before it reports ready (and before any
deadline starts): ``"pkg.module"`` imports it, ``"pkg.module:fn"`` also calls ``fn()``.

Subprocess (not multiprocessing) on purpose: no ``__main__`` re-import under spawn, no fork
of a process that holds torch threads, and it works inside daemonic (Celery) processes.
"""

from __future__ import annotations

import atexit
import importlib
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Sequence

_HDR = struct.Struct(">I")
_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding the `trainer` package
STARTUP_TIMEOUT_S = 120.0
_SERVE = "from trainer.tasks.scorer_process import serve; serve()"


# -- child side ----------------------------------------------------------------------------------


def _read_exact(stream, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _write_frame(out, obj: Any) -> None:
    payload = pickle.dumps(obj)
    out.write(_HDR.pack(len(payload)) + payload)
    out.flush()


def _run_preload(entries: Sequence[str]) -> None:
    for entry in entries:
        module, _, fn = entry.partition(":")
        mod = importlib.import_module(module)
        if fn:
            getattr(mod, fn)()


def serve() -> None:
    """Worker main loop. Protocol stdout is a private dup; fd 1 is pointed at stderr so a
    stray print inside a scorer cannot corrupt the frames."""
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    _run_preload(sys.argv[1:])
    _write_frame(out, ("ready", None))
    while (head := _read_exact(inp, _HDR.size)) is not None:
        body = _read_exact(inp, _HDR.unpack(head)[0])
        if body is None:
            return
        try:
            fn, args = pickle.loads(body)
            reply = (True, fn(*args))
        except Exception:  # noqa: BLE001 - reported to the parent as an "error"
            reply = (False, None)
        _write_frame(out, reply)


# -- parent side ---------------------------------------------------------------------------------


class _Worker:
    def __init__(self, preload: tuple[str, ...]):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
        self.preload = preload
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVE, *preload], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        self.fd = self.proc.stdout.fileno()
        self.buf = bytearray()

    def send(self, payload: bytes) -> None:
        self.proc.stdin.write(_HDR.pack(len(payload)) + payload)
        self.proc.stdin.flush()

    def poll_frame(self) -> Any:
        """Read what is available (call after select says readable). Returns the decoded frame,
        or None if incomplete; raises EOFError if the worker died."""
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            raise EOFError("verifier worker exited")
        self.buf += chunk
        if len(self.buf) < _HDR.size:
            return None
        n = _HDR.unpack_from(self.buf)[0]
        if len(self.buf) < _HDR.size + n:
            return None
        frame = pickle.loads(bytes(self.buf[_HDR.size : _HDR.size + n]))
        del self.buf[: _HDR.size + n]
        return frame

    def wait_ready(self, deadline: float) -> None:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                self.kill()
                raise RuntimeError(f"verifier worker did not start within {STARTUP_TIMEOUT_S:.0f} s")
            try:
                frame = self.poll_frame()
            except EOFError:
                self.kill()
                raise RuntimeError("verifier worker exited during start-up (see its stderr)") from None
            if frame is not None:
                return

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


_idle: dict[tuple[str, ...], list[_Worker]] = {}
_lock = threading.Lock()


class WorkersUnavailable(RuntimeError):
    """Not one verifier worker could be started (no subprocesses here, or they die at start-up)."""


def _take(preload: tuple[str, ...], n: int) -> list[_Worker]:
    """n ready workers: idle ones first, the rest started together and awaited together."""
    with _lock:
        pool = _idle.setdefault(preload, [])
        got = [w for w in (pool.pop() for _ in range(min(n, len(pool)))) if w.alive()]
    fresh = [_Worker(preload) for _ in range(n - len(got))]
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    try:
        for w in fresh:
            w.wait_ready(deadline)
    except RuntimeError:
        for w in got + fresh:
            w.kill()
        raise
    return got + fresh


def _give(workers: list[_Worker]) -> None:
    with _lock:
        for w in workers:
            if w.alive():
                _idle.setdefault(w.preload, []).append(w)


def shutdown() -> None:
    """Kill every idle worker (also registered at exit)."""
    with _lock:
        workers = [w for pool in _idle.values() for w in pool]
        _idle.clear()
    for w in workers:
        w.kill()


def _forget_after_fork() -> None:
    # A forked child (e.g. a Celery prefork process) must not share the parent's pipes.
    global _lock
    _idle.clear()
    _lock = threading.Lock()


atexit.register(shutdown)
os.register_at_fork(after_in_child=_forget_after_fork)


def run_isolated(
    fn: Callable[..., Any], items: Sequence[tuple], timeout_s: float, workers: int, preload: tuple[str, ...] = ()
) -> list[tuple[Any, str | None]]:
    """``fn(*items[i])`` for every i on up to ``workers`` subprocesses, each call limited to
    ``timeout_s`` seconds from when its worker received it. Returns ``(value, None)``,
    ``(None, "error")`` or ``(None, "timeout")`` per item, in order. Raises
    :class:`WorkersUnavailable` if no worker can be started at all (the caller,
    :mod:`trainer.tasks.verify`, then falls back to its softer watchdog threads)."""
    if not items:
        return []
    try:
        pool = _take(preload, max(1, min(workers, len(items))))
    except (OSError, RuntimeError) as e:
        raise WorkersUnavailable(str(e)) from e
    results: list[tuple[Any, str | None] | None] = [None] * len(items)
    busy: dict[int, tuple[_Worker, int, float]] = {}  # fd -> (worker, item, deadline)
    idle: list[_Worker] = []
    todo = deque(range(len(items)))

    def dispatch(w: _Worker) -> None:
        while todo:
            i = todo.popleft()
            try:
                w.send(pickle.dumps((fn, tuple(items[i]))))
            except (pickle.PicklingError, TypeError, AttributeError):
                results[i] = (None, "error")
                continue
            busy[w.fd] = (w, i, time.monotonic() + timeout_s)
            return
        idle.append(w)

    def retire(w: _Worker, i: int, failure: str) -> None:
        del busy[w.fd]
        w.kill()
        results[i] = (None, failure)
        if todo:  # more to do: replace the worker (its start-up is not charged to any item)
            dispatch(_take(preload, 1)[0])

    try:
        for w in pool:
            dispatch(w)
        while busy:
            wait = max(0.0, min(d for _, _, d in busy.values()) - time.monotonic())
            for fd in select.select(list(busy), [], [], wait)[0]:
                w, i, _ = busy[fd]
                try:
                    frame = w.poll_frame()
                except EOFError:
                    retire(w, i, "error")
                    continue
                if frame is not None:
                    del busy[fd]
                    ok, value = frame
                    results[i] = (value, None) if ok else (None, "error")
                    dispatch(w)
            now = time.monotonic()
            for fd, (w, i, deadline) in list(busy.items()):
                if deadline <= now and fd in busy:
                    retire(w, i, "timeout")
    finally:
        for w, _, _ in busy.values():  # only on an exception (e.g. KeyboardInterrupt)
            w.kill()
        _give(idle)
    return results  # type: ignore[return-value]
