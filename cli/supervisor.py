"""The process supervisor behind ``aero up``: it starts the platform's processes (API, worker,
reaper, dashboard) as children with logs in <data dir>/logs, restarts one that dies (with a
backoff, giving up on one that keeps dying), waits for the API to answer, and stops them all.
It knows nothing of what the children are: cli/platform_cmds.py builds their command lines."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.console import Console

from cli.consoles import err

ROOT = Path(__file__).resolve().parent.parent  # the children's working directory


def _die_with_parent() -> None:
    """Child pre-exec (Linux): receive SIGTERM if `aero up` dies without cleaning up."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class Child:
    name: str
    argv: list[str]
    stop_signal: int = signal.SIGTERM
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    log: Path | None = None
    restarts: list[float] = field(default_factory=list)  # monotonic times of the restarts
    restart_at: float | None = None  # when a dead child is due to start again (backoff)


@dataclass
class Supervisor:
    """Starts children in their own sessions (Ctrl-C reaches only `aero up`, which stops them in
    order) with logs in <data dir>/logs, restarts a child that dies (:meth:`check`), and stops
    them all on exit.

    Restart policy: the n-th restart within a minute waits ``backoff_s * 2**(n-1)`` seconds (at
    most ``backoff_max_s``); a child that died ``max_restarts_per_min`` times within a minute is
    not restarted again: :meth:`check` returns why, and `aero up` stops the platform."""

    log_dir: Path
    children: list[Child] = field(default_factory=list)
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    max_restarts_per_min: int = 5
    gave_up: Child | None = None  # the child that kept dying, once check() gave up on it
    say: Callable[[str], None] = field(default=lambda msg: err.print(msg, soft_wrap=True, markup=False, highlight=False))

    def _spawn(self, child: Child) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        child.log = self.log_dir / f"{child.name}.log"
        f = open(child.log, "ab")
        child.proc = subprocess.Popen(child.argv, cwd=ROOT, env={**os.environ, **child.env}, stdout=f, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent)
        f.close()

    def start(self, child: Child) -> Child:
        self._spawn(child)
        self.children.append(child)
        return child

    def dead(self) -> list[Child]:
        return [c for c in self.children if c.proc.poll() is not None]

    def check(self, now: float | None = None) -> str | None:
        """Restart dead children once their backoff has passed; None while the platform can go
        on, else a sentence saying which child keeps dying (then restart nothing more)."""
        now = time.monotonic() if now is None else now
        for c in self.dead():
            if c.restart_at is None:  # a death not seen before
                # Its session may hold orphans (a SIGKILLed Celery main process leaves its pool
                # children, each holding a run): end them before a new one starts.
                try:
                    os.killpg(c.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                c.restarts = [t for t in c.restarts if now - t < 60.0]
                code = c.proc.returncode
                how = f"killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals() else f"exited with {code}"
                if len(c.restarts) >= self.max_restarts_per_min:
                    self.gave_up = c
                    return (f"{c.name} {how} and has died {len(c.restarts) + 1} times within a minute: not restarting it "
                            f"(see its log {c.log}); stopping the platform")
                delay = min(self.backoff_max_s, self.backoff_s * 2 ** len(c.restarts))
                c.restart_at = now + delay
                self.say(f"{c.name} (pid {c.proc.pid}) {how}; restarting it in {delay:.1f} s "
                         f"(restart {len(c.restarts) + 1} of at most {self.max_restarts_per_min} a minute; log {c.log})")
            if now >= c.restart_at:
                old = c.proc.pid
                self._spawn(c)
                c.restarts.append(now)
                c.restart_at = None
                self.say(f"{c.name} restarted (pid {old} -> {c.proc.pid})")
        return None

    def stop(self, grace_s: float = 30.0) -> None:
        """Stop signal to each child, then SIGKILL to any still alive after ``grace_s`` (Celery's
        cold shutdown alone takes 5-15 s on a busy 2-core machine)."""
        for c in self.children:
            if c.proc.poll() is None:
                # The leader only: Celery's main process stops its pool itself (a SIGQUIT that
                # also reaches the pool children leaves the cold shutdown hanging).
                c.proc.send_signal(c.stop_signal)
        deadline = time.monotonic() + grace_s
        for c in self.children:
            try:
                c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                err.print(f"[yellow]{c.name} did not stop in {grace_s:.0f}s: killing it[/]")
                try:
                    os.killpg(c.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                c.proc.wait()


def wait_healthy(url: str, sup: Supervisor, timeout_s: float = 90.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sup.dead():
            return False
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    return False


def tail(path: Path | None, n: int = 25) -> str:
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


# Display names of the children, for the final "stopped" line.
CHILD_NAMES = {"api": "API"}


def shutdown(sup: Supervisor, console: Console) -> None:
    """Stop every child, then say so: the last line `aero up` prints, so a user knows nothing of
    the platform is left running."""
    console.print("stopping ...")
    sup.stop()
    names = ", ".join(CHILD_NAMES.get(c.name, c.name) for c in sup.children) or "nothing was running"
    console.print(f"AERO Lab stopped ({names})", soft_wrap=True)
