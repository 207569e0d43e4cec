"""A background heartbeat: proves a run's worker is alive between (possibly long) steps.

The progress callback also beats after every step; this thread covers steps, evals and
checkpoints that take longer than the reaper's stale timeout would tolerate.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger(__name__)


class Heartbeat:
    """Calls ``beat()`` every ``interval_s`` seconds on a daemon thread until stopped.

    A failing beat (database briefly locked or unreachable) is logged and retried next
    interval: a missed heartbeat is harmless unless it lasts longer than the stale timeout.
    Use as a context manager around the training call.
    """

    def __init__(self, beat: Callable[[], None], interval_s: float):
        self.beat, self.interval_s = beat, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="aero-heartbeat", daemon=True)
        self.beats = 0

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
                self.beats += 1
            except Exception:  # noqa: BLE001
                log.warning("heartbeat failed; retrying in %.1fs", self.interval_s, exc_info=True)

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 5)
