"""No starvation (trainer/platform/reservations.py): a multi-GPU run that has waited past AERO_STARVATION_S
holds smaller runs back until it is placed.

The rules pure (who holds back for whom, what could ever be placed, the setting), then on a real
Ray head owning 4 logical GPUs (as ``aero worker --gpus 0,1,2,3`` starts it): two threads place
1-GPU groups back to back (each held 0.3-0.6 s, then released and placed again) while one run asks
for 4. With the limit at 2 s the 4-GPU run is placed within a bound of hand-overs (1-GPU
placements granted while it waits); with the limit 0 (off) it is not placed within the same bound.
And the embedded engine's GPU holder holds back for a registered starving run until that entry
expires (its run died) or is removed."""

from __future__ import annotations

import math
import time

import pytest

from benchmarks.fairness_wait import Contention, contend, warm_board
from trainer.platform import reservations
from trainer.platform.reservations import Reservation, fits, holds_back, starvation_limit

LIMIT_S = 2.0
HOLD_S = (0.3, 0.6)
STREAMS = 2
SLACK_S = 2.0  # the starving run's registration: its next poll (POLL_S) and one board call on a busy host
# A stream hands over at most once per HOLD_S[0] (each 1-GPU run holds at least that long): until the
# big run registers (LIMIT_S + a poll + the slack), then at most one more each (a request that read
# the board just before the registration).
BOUND = STREAMS * (math.ceil((LIMIT_S + 0.5 + SLACK_S) / HOLD_S[0]) + 1)


def test_a_smaller_run_holds_back_only_for_a_larger_starving_one():
    entries = {"a": {"gpus": 4, "since": 0.0}, "b": {"gpus": 2, "since": 0.0}}
    assert holds_back(1, entries) == entries["a"]  # the largest one
    assert holds_back(2, entries) == entries["a"]
    assert holds_back(4, entries) is None  # as large: competes on equal terms
    assert holds_back(1, entries, own_key="a") == entries["b"]  # never for itself
    assert holds_back(1, {}) is None


def test_only_a_request_the_cluster_could_ever_place_registers():
    two_nodes = {"n1": 4.0, "n2": 2.0}
    assert fits(two_nodes, 4, 1) and not fits(two_nodes, 4, 2) and fits(two_nodes, 2, 2)
    assert not fits(two_nodes, 3, 1, node_id="n2") and fits(two_nodes, 3, 1, node_id="n1")
    assert not fits({}, 1, 1)


def test_the_limit_is_the_operators_setting(monkeypatch):
    assert starvation_limit({}) == reservations.DEFAULT_LIMIT_S == 300.0
    assert starvation_limit({"AERO_STARVATION_S": "0"}) == 0.0 and starvation_limit({"AERO_STARVATION_S": " 2.5 "}) == 2.5
    for bad in ("soon", "-1", "nan"):
        with pytest.raises(ValueError, match="AERO_STARVATION_S"):
            starvation_limit({"AERO_STARVATION_S": bad})
    from worker.settings import WorkerSettings

    monkeypatch.setenv("AERO_STARVATION_S", "30")
    assert WorkerSettings().starvation_s == 30.0 and Reservation(4).limit_s == 30.0  # what the run's process reads
    assert Reservation.of(4, 1, None, shared=True).limit_s == 30.0  # on the operator's cluster
    assert Reservation.of(4, 1, None, shared=False).limit_s == 0.0  # a Ray of the run's own: nobody competes
    assert Reservation.of(4, 1, 2.0, shared=False).limit_s == 2.0
    monkeypatch.setenv("AERO_STARVATION_S", "soon")
    with pytest.raises(ValueError, match="AERO_STARVATION_S must be a number"):  # the worker stops at start
        WorkerSettings()


def test_only_a_multi_gpu_request_starves_and_a_limit_of_0_asks_nothing():
    past = time.monotonic() - 10
    assert Reservation(4, limit_s=5, since=past).starving()
    assert not Reservation(1, limit_s=5, since=past).starving()  # a 1-GPU request takes the first GPU that frees
    assert not Reservation(4, limit_s=50, since=past).starving()
    assert "smaller runs hold back for it (it waited over 5 s" in Reservation(4, limit_s=5, registered=True).note()
    assert Reservation(4, limit_s=5).note() == ""
    off = Reservation(4, limit_s=0, since=past)
    assert not off.starving() and off.blocker(waiting=True) is None and off.handle is None  # no Ray call at all


# ---------------------------------------------------------------- on a real Ray head


@pytest.fixture(scope="module")
def four_gpus():
    """A Ray head owning logical GPUs 0-3 (worker/ray_head.py, a token of its own), this process
    connected to it, and the cluster's reservation board started."""
    ray = pytest.importorskip("ray")
    from ray._private.authentication_test_utils import reset_auth_token_state

    from trainer.platform import placement
    from worker import ray_head

    with pytest.MonkeyPatch.context() as env:  # the token, undone at the end
        for k, v in ray_head.auth_env().items():
            env.setenv(k, v)
        reset_auth_token_state()
        head, address = ray_head.start_head(["0", "1", "2", "3"])
        try:
            with placement.ray_session(address=address):
                warm_board()  # its first start (seconds here) is not what the rounds measure
                yield ray
        finally:
            ray_head.stop_head(head)
    reset_auth_token_state()


@pytest.mark.slow
@pytest.mark.timing  # hand-overs against a clock (the limit): alone, as `make test` runs timing tests
@pytest.mark.timeout(300)
def test_a_4_gpu_run_is_placed_within_a_bound_of_hand_overs_and_not_without_the_limit(four_gpus):
    ray = four_gpus
    load = Contention(big_gpus=4, streams=STREAMS, hold_s=HOLD_S, max_handovers=BOUND, max_wait_s=120, seed=1)
    t0 = time.monotonic()
    fair = contend(LIMIT_S, load)
    took = time.monotonic() - t0
    print(f"\nlimit {LIMIT_S:g} s: {fair} (bound {BOUND} hand-overs; round {took:.1f} s)")
    assert fair.placed and fair.handovers <= BOUND, fair
    assert fair.waited_s > LIMIT_S and fair.handovers > 0, fair  # placed once it starved, not by a lucky gap
    assert ray.get(reservations.board().starving.remote()) == {}  # placed: it unregistered
    unfair = contend(0.0, load)
    print(f"limit off: {unfair}")
    assert not unfair.placed and unfair.handovers >= BOUND, unfair  # Ray handed GPUs over BOUND times, never 4


@pytest.mark.slow
@pytest.mark.timing  # waits for an entry's expiry, within bounds
@pytest.mark.timeout(300)
def test_the_embedded_holder_holds_back_until_the_starving_entry_expires(four_gpus):
    ray = four_gpus
    from trainer.platform import placement

    board = reservations.board()
    ray.get(board.register.remote("a-dead-run", 4, 60.0, 3.0))  # a starving 4-GPU run that stops renewing
    texts: list = []
    t0 = time.monotonic()
    holder = placement.hold_local_gpus(1, should_stop=lambda: time.monotonic() - t0 > 60, on_wait=texts.append,
                                       starvation_s=300)
    waited = time.monotonic() - t0
    assert holder is not None and 2.0 < waited < 30, waited  # held back until the entry's 3 s ran out
    assert texts and "held back for a run that has waited over 300 s (AERO_STARVATION_S) for 4 GPU(s)" in texts[0], texts
    ray.kill(holder)
    # stopped while held back: nothing asked of Ray, None
    ray.get(board.register.remote("another", 2, 60.0, 60.0))
    t0 = time.monotonic()
    assert placement.hold_local_gpus(1, should_stop=lambda: time.monotonic() - t0 > 1.5, starvation_s=300) is None
    ray.get(board.unregister.remote("another"))
    holder = placement.hold_local_gpus(1, should_stop=lambda: time.monotonic() - t0 > 60, starvation_s=300)
    assert holder is not None  # unregistered (placed or stopped): the smaller run goes on
    ray.kill(holder)
