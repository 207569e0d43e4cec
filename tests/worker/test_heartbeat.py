"""Heartbeat thread: beats on its interval, survives a failing beat, stops on exit."""

from __future__ import annotations

import time

import pytest

from worker.heartbeat import Heartbeat

pytestmark = pytest.mark.timing  # wall-clock budgets: `make test` runs these one at a time


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


def test_kick_beats_at_once_and_kicks_coalesce():
    calls = []
    with Heartbeat(lambda: calls.append(time.monotonic()), 60.0) as hb:
        t0 = time.monotonic()
        hb.kick()
        deadline = time.monotonic() + 5
        while not calls and time.monotonic() < deadline:
            time.sleep(0.005)
        assert calls and calls[0] - t0 < 1.0  # not the 60 s interval
        for _ in range(50):
            hb.kick()
        time.sleep(0.2)
    assert 2 <= len(calls) <= 10  # fifty kicks coalesce into a few beats
