"""How lists show a run (common/run_state.py): a running run with ``waiting_for`` reads
'waiting', for as long as ``waiting_since`` says; every other run its status."""

from datetime import UTC, datetime

import pytest

from common.run_state import WAITING, duration_text, parse_time, state_of, waited_text

NOW = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)


def test_state_is_the_apis_or_derived_from_status_and_waiting_for():
    assert state_of({"status": "running", "state": "waiting"}) == WAITING
    assert state_of({"status": "running", "waiting_for": "1 GPU(s): 0 of 1 free"}) == WAITING  # an answer without state
    assert state_of({"status": "running", "waiting_for": None}) == "running"
    assert state_of({"status": "queued", "waiting_for": "stale"}) == "queued"  # only a running run waits


@pytest.mark.parametrize("seconds, text", [(-3, "0s"), (0, "0s"), (59.9, "59s"), (60, "1m 00s"), (185, "3m 05s"),
                                           (3600, "1h 00m"), (7530, "2h 05m"), (86400, "1d 0h"), (3 * 86400 + 4 * 3600 + 59, "3d 4h")])
def test_duration_text_takes_the_two_largest_units(seconds, text):
    assert duration_text(seconds) == text


def test_waited_text_counts_from_waiting_since():
    run = {"status": "running", "state": "waiting", "waiting_for": "x", "waiting_since": "2026-12-06T11:56:55Z"}
    assert waited_text(run, NOW) == "3m 05s"
    assert waited_text({**run, "waiting_since": "2026-12-06T11:56:55.250000"}, NOW) == "3m 04s"  # naive: UTC
    assert waited_text({**run, "waiting_since": None}, NOW) == ""  # waiting, since no recorded time
    assert waited_text({**run, "state": "running", "waiting_for": None}, NOW) == ""
    assert parse_time("not a time") is None and parse_time(None) is None
