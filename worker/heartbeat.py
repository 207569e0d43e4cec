"""A background heartbeat: proves a run's worker is alive between (possibly long) steps.

It calls ``beat()`` every ``interval_s`` seconds, and at once when ``kick()`` is called (the
runner kicks it after every training step, so progress reaches the store without the training
thread waiting for a database write). Beats are serial; kicks that arrive during a beat
coalesce into one more beat.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger(__name__)


class Heartbeat:
    """Calls ``beat()`` on a daemon thread every ``interval_s`` seconds and on ``kick()``.

    A failing beat (database briefly locked or unreachable) is logged and retried next time: a
    missed heartbeat is harmless unless it lasts longer than the reaper's stale timeout.
    Use as a context manager around the training call.
    """

    def __init__(self, beat: Callable[[], None], interval_s: float):
        self.beat, self.interval_s = beat, interval_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="aero-heartbeat", daemon=True)
        self.beats = self.failures = 0

    def kick(self) -> None:
        """Beat as soon as possible (non-blocking)."""
        self._wake.set()

    def _beat_once(self) -> None:
        try:
            self.beat()
            self.beats += 1
        except Exception:  # noqa: BLE001
            self.failures += 1
            log.warning("heartbeat failed; retrying in %.1fs", self.interval_s, exc_info=self.failures == 1)

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            self._beat_once()

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=self.interval_s + 30)
