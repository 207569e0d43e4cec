"""Serve the API on several processes: ``python -m backend.serve --workers 2`` (what the
compose file runs).

Why not ``uvicorn --workers N``: its workers share one listening socket, and a worker's event
loop accepts every connection that is waiting when it wakes. A burst of keep-alive connections
(a page of plots, 20 dashboard users) can all land on one process while the other idles, and a
Python process serves at most one core: 20 of 20 connections went to one worker in about one
benchmark run in three, halving throughput (BENCHMARKS.md, "Uncached reads: balanced workers").
Here each worker accepts on its own socket, bound to the same port with ``SO_REUSEPORT``, and
the kernel spreads new connections over the sockets by a hash of their addresses.

The parent binds the sockets (so a port in use fails at once, before any worker starts), holds
them, and restarts a worker that dies on the same socket: connections the kernel queued on it
are served by the new worker, not dropped. SIGTERM or SIGINT stops the workers gracefully. A
worker whose parent vanishes (SIGKILL) stops itself, so no orphan keeps the port.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

log = logging.getLogger("aero.serve")

APP = "backend.main:app"
RESTART_BACKOFF_S = (1.0, 30.0)  # first wait, cap; doubled after each death within a minute


def bind_sockets(host: str, port: int, n: int) -> list[socket.socket]:
    """``n`` listening sockets on (host, port), in one SO_REUSEPORT group. Port 0 picks a free
    port for the first; the others join it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(family, socket.SOCK_STREAM)
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            s.bind((host, port))
            port = s.getsockname()[1]
            s.listen(2048)
            s.set_inheritable(True)
    except OSError:
        for s in socks:
            s.close()
        raise
    return socks


def _exit_with_parent(server: Any, parent: int) -> None:
    while not server.should_exit:
        if os.getppid() != parent:
            server.should_exit = True  # uvicorn's graceful shutdown, from another thread
            return
        time.sleep(1.0)


def _worker(sock: socket.socket, parent: int, uvicorn_kw: dict[str, Any]) -> None:
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(APP, **uvicorn_kw))
    threading.Thread(target=_exit_with_parent, args=(server, parent), daemon=True).start()
    server.run(sockets=[sock])


class Workers:
    """The worker processes, one per socket; a dead one is started again on its socket after a
    backoff, by :meth:`restart_dead` in the parent's loop (no timer can fire after :meth:`stop`)."""

    def __init__(self, socks: list[socket.socket], uvicorn_kw: dict[str, Any]):
        self.socks, self.kw = socks, uvicorn_kw
        self.ctx = multiprocessing.get_context("spawn")  # no state inherited from the parent
        self.procs: list[Any] = [None] * len(socks)
        self.due: list[float | None] = [None] * len(socks)  # when a dead worker's slot starts again
        self.deaths: list[list[float]] = [[] for _ in socks]

    def start(self, i: int) -> None:
        p = self.ctx.Process(target=_worker, args=(self.socks[i], os.getpid(), self.kw), name=f"api-{i}", daemon=False)
        p.start()
        self.procs[i], self.due[i] = p, None

    def restart_dead(self, now: float) -> None:
        for i, p in enumerate(self.procs):
            if p is None:
                if self.due[i] is not None and now >= self.due[i]:
                    self.start(i)
                continue
            if p.is_alive():
                continue
            self.deaths[i] = [t for t in self.deaths[i] if now - t < 60] + [now]
            wait = min(RESTART_BACKOFF_S[1], RESTART_BACKOFF_S[0] * 2 ** (len(self.deaths[i]) - 1))
            log.warning("API worker %d (pid %s) exited with %s; restarting it in %.0f s", i, p.pid, p.exitcode, wait)
            self.procs[i], self.due[i] = None, now + wait

    def stop(self, grace_s: float = 30.0) -> None:
        live = [p for p in self.procs if p is not None and p.is_alive()]
        for p in live:
            p.terminate()  # SIGTERM: uvicorn finishes the requests in flight
        deadline = time.monotonic() + grace_s
        for p in live:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()


def serve(host: str, port: int, workers: int, **uvicorn_kw: Any) -> None:
    """Run the API on ``workers`` processes until SIGTERM or SIGINT. One worker is plain uvicorn."""
    uvicorn_kw.setdefault("lifespan", "on")
    if workers <= 1:
        import uvicorn

        uvicorn.run(APP, host=host, port=port, **uvicorn_kw)
        return
    try:
        socks = bind_sockets(host, port, workers)
    except OSError as e:
        raise SystemExit(f"backend.serve: cannot listen on {host}:{port}: {e.strerror or e}") from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    pool = Workers(socks, uvicorn_kw)
    for i in range(workers):
        pool.start(i)
    log.info("API on %s:%d, %d workers (SO_REUSEPORT)", host, socks[0].getsockname()[1], workers)
    try:
        while not stop.wait(0.5):
            pool.restart_dead(time.monotonic())
    finally:
        pool.stop()
        for s in socks:
            s.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m backend.serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    ap.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    ap.add_argument("--workers", type=int, default=int(os.environ.get("AERO_API_WORKERS", "1")),
                    help="API processes, each on its own SO_REUSEPORT socket (env AERO_API_WORKERS; default 1)")
    ap.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug", "trace"])
    ap.add_argument("--no-access-log", action="store_true", help="do not log each request")
    ap.add_argument("--forwarded-allow-ips", default=None,
                    help="proxies trusted for X-Forwarded-* headers (uvicorn's option; default 127.0.0.1)")
    args = ap.parse_args(argv)
    if args.workers < 1:
        ap.error(f"--workers: must be at least 1, got {args.workers}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    kw: dict[str, Any] = {"log_level": args.log_level, "access_log": not args.no_access_log}
    if args.forwarded_allow_ips is not None:
        kw["forwarded_allow_ips"] = args.forwarded_allow_ips
    serve(args.host, args.port, args.workers, **kw)


if __name__ == "__main__":
    main()
