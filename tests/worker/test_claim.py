"""Claiming a run (worker/claim.py): who owns it, fair share, redelivery and takeover, on SQLite
and PostgreSQL."""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import pytest

from backend.db.models import utcnow
from tests.worker.runs import dead_pid, run_row as get_run, set_run
from worker.claim import acquire, decide, owner_state, worker_identity
from worker.settings import WorkerSettings

WS = WorkerSettings(stale_after_s=60.0, heartbeat_s=5.0, max_attempts=3)


# ---------------------------------------------------------------- pure decisions


def _d(status="running", worker="h:1:1", me="h:2:2", owner="unknown", age=1.0, attempts=1, cancel=False):
    return decide(status, worker=worker, me=me, owner=owner, heartbeat_age_s=age, attempts=attempts,
                  cancel_requested=cancel, stale_after_s=60.0, max_attempts=3).action


@pytest.mark.parametrize(
    "kw, action",
    [
        (dict(status="succeeded"), "skip"),
        (dict(status="failed"), "skip"),
        (dict(status="cancelled"), "skip"),
        (dict(status="queued"), "claim"),
        (dict(worker="h:2:2"), "takeover"),  # mine, from an earlier task of this process that ended early
        (dict(owner="alive", age=1000.0), "skip"),  # alive owner wins even with a stale heartbeat
        (dict(owner="unknown", age=10.0), "wait"),
        (dict(owner="unknown", age=61.0), "takeover"),
        (dict(owner="unknown", age=None), "takeover"),  # never beat
        (dict(owner="dead", age=1.0), "takeover"),  # dead on this host: no need to wait
        (dict(owner="dead", attempts=3), "fail"),
        (dict(owner="dead", attempts=2), "takeover"),
        (dict(owner="dead", cancel=True), "cancel"),
        (dict(owner="unknown", age=61.0, cancel=True, attempts=9), "cancel"),
    ],
)
def test_decide(kw, action):
    assert _d(**kw) == action


def test_owner_state():
    host = socket.gethostname()
    me = worker_identity()
    assert me.startswith(f"{host}:{os.getpid()}:") and me.rsplit(":", 1)[1].isdigit()
    assert owner_state(me) == "alive"
    assert owner_state(f"{host}:{dead_pid()}:123") == "dead"
    # Same pid, different start time: the pid was recycled, the owner is gone.
    assert owner_state(f"{host}:{os.getpid()}:1") == "dead"
    assert owner_state(f"{host}:{os.getpid()}:") == "alive"  # no start time recorded: pid only
    assert owner_state(f"elsewhere-{host}:{os.getpid()}:1") == "unknown"
    assert owner_state(None) == "dead"
    assert owner_state("garbage") == "unknown"


# ---------------------------------------------------------------- acquire against a real store


def test_claim_queued(db_url, make_run):
    rid = make_run()
    run, why = acquire(db_url, rid, "me:1:1", WS)
    assert why == "claimed" and run.status == "running" and run.worker == "me:1:1" and run.attempts == 1
    assert run.heartbeat_at is not None and run.started_at is not None
    # A second delivery while the owner (this live process) runs it: dropped, owner unchanged.
    set_run(db_url, rid, worker=worker_identity())
    run2, why2 = acquire(db_url, rid, "other:2:2", WS)
    assert run2 is None and "live worker" in why2
    assert get_run(db_url, rid).worker == worker_identity()


def test_finished_and_cancelled_runs_are_not_rerun(db_url, make_run):
    done = make_run()
    set_run(db_url, done, status="succeeded")
    assert acquire(db_url, done, "me:1:1", WS)[0] is None
    cancelled = make_run()
    set_run(db_url, cancelled, cancel_requested=True)  # queued + cancel -> cancelled, never started
    assert acquire(db_url, cancelled, "me:1:1", WS)[0] is None
    r = get_run(db_url, cancelled)
    assert r.status == "cancelled" and r.attempts == 0 and r.started_at is None
    run, why = acquire(db_url, 999_999, "me:1:1", WS)
    assert run is None and "run 999999 does not exist" in why


# ---------------------------------------------------------------- tickets: fair share and redelivery


def test_a_ticket_claims_the_fair_pick_and_its_redelivery_returns_to_that_run(db_url, make_run):
    a1, a2, a3, b1 = make_run(), make_run(), make_run(), make_run()
    for rid in (a1, a2, a3):
        set_run(db_url, rid, owner="alice")
    set_run(db_url, b1, owner="bob")
    set_run(db_url, a1, status="running", worker="remote-host:7:7", heartbeat_at=utcnow(), started_at=utcnow(), attempts=1)
    run, why = acquire(db_url, a2, "me:1:1", WS)  # a2's message: bob has nothing running, alice has a1
    assert run.id == b1 and run.ticket == a2 and "fair share" in why
    dead = f"{socket.gethostname()}:{dead_pid()}:1"
    set_run(db_url, b1, worker=dead)  # the worker serving ticket a2 dies; the broker redelivers a2
    run, why = acquire(db_url, a2, "me:2:2", WS, sleep=lambda s: pytest.fail("must not wait"))
    assert run.id == b1 and run.worker == "me:2:2" and run.attempts == 2 and "gone" in why
    assert get_run(db_url, a2).status == "queued"
    # a message whose run was deleted still serves its queue: the oldest of alice's queued runs
    run, _ = acquire(db_url, 999_999, "me:3:3", WS, queue="cpu")
    assert run.id == a2 and run.ticket == 999_999


def test_owners_at_the_running_quota_are_skipped(db_url, make_run):
    a1, a2, b1 = make_run(), make_run(), make_run()
    set_run(db_url, a1, owner="alice", status="running", worker="remote-host:7:7", heartbeat_at=utcnow(), attempts=1)
    set_run(db_url, a2, owner="alice")
    set_run(db_url, b1, owner="bob")
    assert acquire(db_url, a2, "me:1:1", WS, running_cap=1)[0].id == b1
    run, why = acquire(db_url, b1, "me:1:1", WS, running_cap=1)  # only alice's a2 is left, and alice is at 1
    assert run is None and "no queued run" in why and get_run(db_url, a2).status == "queued"
    assert acquire(db_url, b1, "me:1:1", WS, running_cap=2)[0].id == a2


def test_redelivered_run_with_dead_owner_is_taken_over_at_once(db_url, make_run):
    rid = make_run()
    dead = f"{socket.gethostname()}:{dead_pid()}:1"
    set_run(db_url, rid, status="running", worker=dead, heartbeat_at=utcnow(), attempts=1)
    run, why = acquire(db_url, rid, "me:1:1", WS, sleep=lambda s: pytest.fail("must not wait"))
    assert run.worker == "me:1:1" and run.attempts == 2 and run.status == "running"
    assert "gone" in why


def test_dead_owner_out_of_attempts_fails(db_url, make_run):
    rid = make_run()
    set_run(db_url, rid, status="running", worker=f"{socket.gethostname()}:{dead_pid()}:1",
            heartbeat_at=utcnow(), attempts=3)
    assert acquire(db_url, rid, "me:1:1", WS)[0] is None
    r = get_run(db_url, rid)
    assert r.status == "failed" and "worker lost" in r.error and "3 attempt" in r.error and r.finished_at


def test_remote_owner_whose_heartbeat_moves_keeps_its_run(db_url, make_run):
    rid = make_run()
    set_run(db_url, rid, status="running", worker="remote-host:7:7", heartbeat_at=utcnow(), attempts=1)
    waits = []

    def owner_beats(s):  # the live owner writes a heartbeat while we wait
        waits.append(s)
        set_run(db_url, rid, heartbeat_at=utcnow() + timedelta(microseconds=len(waits)))

    run, why = acquire(db_url, rid, "me:1:1", WS, sleep=owner_beats)
    assert run is None and "heartbeat moved" in why and len(waits) == 1 and waits[0] == 5.0
    assert get_run(db_url, rid).worker == "remote-host:7:7"


def test_remote_owner_that_stops_beating_is_taken_over_after_the_stale_timeout(db_url, make_run):
    rid = make_run()
    set_run(db_url, rid, status="running", worker="remote-host:7:7", heartbeat_at=utcnow() - timedelta(seconds=52),
            attempts=1)
    waits = []
    clock = lambda: utcnow() + timedelta(seconds=sum(waits))  # noqa: E731  (time passes only in sleep)

    run, why = acquire(db_url, rid, "me:1:1", WS, sleep=waits.append, now=clock)
    assert run is not None and run.worker == "me:1:1" and run.attempts == 2
    assert len(waits) == 2 and waits[0] == 5.0  # waits a heartbeat interval at a time
    # ...and a stale remote owner is taken over without waiting at all.
    set_run(db_url, rid, worker="remote-host:8:8", heartbeat_at=utcnow() - timedelta(seconds=61))
    run, _ = acquire(db_url, rid, "me:2:2", WS, sleep=lambda s: pytest.fail("must not wait"))
    assert run.worker == "me:2:2" and run.attempts == 3


def test_queued_run_with_a_cancel_request_is_cancelled_not_started(db_url, make_run):
    assert _d(status="queued", cancel=True) == "cancel"
    rid = make_run()
    set_run(db_url, rid, cancel_requested=True)
    run, why = acquire(db_url, rid, "me:1:1", WS)
    r = get_run(db_url, rid)
    assert run is None and "before it started" in why and (r.status, r.attempts, r.worker) == ("cancelled", 0, None)
