"""Heartbeat thread: beats on its interval, survives a failing beat, stops on exit."""

from __future__ import annotations

import time

from worker.heartbeat import Heartbeat


def test_beats_survives_errors_and_stops():
    calls = []

    def beat():
        calls.append(time.monotonic())
        if len(calls) == 2:
            raise RuntimeError("database is locked")

    with Heartbeat(beat, 0.05) as hb:
        time.sleep(0.4)
    n = len(calls)
    assert n >= 4  # kept beating after the failure
    assert hb.beats == n - 1  # the failed beat is not counted
    time.sleep(0.15)
    assert len(calls) == n  # stopped
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert min(gaps) >= 0.04
