"""The run state machine and repository functions, on SQLite and PostgreSQL."""

from datetime import timedelta

import pytest
from sqlalchemy import update

from backend.db import runs as repo
from backend.db.models import RUN_STATUSES, Run, utcnow
from trainer.spec.config import RunConfig

ALLOWED = {
    ("queued", "running"), ("queued", "cancelled"), ("queued", "failed"),
    ("running", "running"), ("running", "succeeded"), ("running", "failed"), ("running", "cancelled"), ("running", "queued"),
    ("failed", "queued"), ("cancelled", "queued"),  # resume_run
}


def _run(session, **cfg):
    run = repo.create_run(session, RunConfig(**cfg).model_dump(mode="json"), queue="cpu")
    session.commit()
    return run


def _force(session, run_id, status):
    session.execute(update(Run).where(Run.id == run_id).values(status=status))
    session.commit()


def test_transition_table_is_exactly_the_documented_one():
    assert {(a, b) for a in RUN_STATUSES for b in RUN_STATUSES if repo.can_transition(a, b)} == ALLOWED


def _status(session, run_id):
    return repo.get_run(session, run_id, refresh=True).status


# Each transition function, the statuses it may start from, and the status it leads to. Every
# function is tried from every status: it must apply exactly from its sources, and nowhere else
# change anything.
MOVES = {
    "claim_run": (lambda s, r: repo.claim_run(s, r.id, "w2") is not None, {"queued"}, "running"),
    "cancel_queued": (lambda s, r: repo.cancel_queued(s, r.id), {"queued"}, "cancelled"),
    "take_over": (lambda s, r: repo.take_over(s, r.id, "w1", "w2") is not None, {"running"}, "running"),
    "mark_succeeded": (lambda s, r: repo.mark_succeeded(s, r.id, worker="w1"), {"running"}, "succeeded"),
    "mark_cancelled": (lambda s, r: repo.mark_cancelled(s, r.id, worker="w1"), {"running"}, "cancelled"),
    "mark_failed/owner": (lambda s, r: repo.mark_failed(s, r.id, "x", worker="w1"), {"running"}, "failed"),
    "mark_failed": (lambda s, r: repo.mark_failed(s, r.id, "x"), {"queued", "running"}, "failed"),
    "release_orphan": (lambda s, r: repo.release_orphan(s, r, "gone", max_attempts=3) is not None, {"running"}, "queued"),
}


@pytest.mark.parametrize("name", MOVES)
@pytest.mark.parametrize("src", RUN_STATUSES)
def test_each_transition_applies_exactly_from_its_sources(session, src, name):
    move, sources, dst = MOVES[name]
    assert all((a, dst) in ALLOWED for a in sources)
    run = _run(session)
    session.execute(update(Run).where(Run.id == run.id).values(status=src, worker="w1", attempts=1))
    session.commit()
    run = repo.get_run(session, run.id, refresh=True)
    applied = move(session, run)
    session.commit()
    assert applied is (src in sources)
    assert _status(session, run.id) == (dst if applied else src)


def test_owner_guards(session):
    run = _run(session)
    assert repo.claim_run(session, run.id, "w1").worker == "w1"
    assert not repo.mark_succeeded(session, run.id, worker="w2")  # not the owner: nothing happens
    assert not repo.mark_failed(session, run.id, "x", worker="w2")
    assert repo.take_over(session, run.id, "w2", "w3") is None  # the CAS names the wrong old owner
    assert repo.record_progress(session, run.id, 1, 5, worker="w2") is None  # lost: writes nothing
    session.commit()
    r = repo.get_run(session, run.id, refresh=True)
    assert (r.status, r.worker, r.current_step) == ("running", "w1", 0)


def test_claim_lifecycle_and_takeover(session):
    run = _run(session, steps=10)
    assert (run.status, run.attempts, run.started_at) == ("queued", 0, None)
    claimed = repo.claim_run(session, run.id, "w1")
    assert (claimed.status, claimed.attempts, claimed.worker) == ("running", 1, "w1")
    started = claimed.started_at
    assert started is not None and claimed.heartbeat_at is not None
    session.commit()
    assert repo.claim_run(session, run.id, "w2") is None  # a second delivery never claims a running run
    again = repo.take_over(session, run.id, "w1", "w2")  # a redelivered task replaces a lost owner
    assert (again.status, again.attempts, again.worker, again.started_at) == ("running", 2, "w2", started)
    assert repo.record_progress(session, run.id, 4, 10, worker="w2") is False
    session.commit()
    r = repo.get_run(session, run.id, refresh=True)
    assert (r.current_step, r.progress) == (4, pytest.approx(0.4))
    assert repo.mark_succeeded(session, run.id, worker="w2")
    done = repo.get_run(session, run.id, refresh=True)
    assert (done.status, done.progress) == ("succeeded", 1.0) and done.finished_at is not None
    session.commit()
    assert repo.claim_run(session, run.id, "w3") is None  # finished: nothing to do
    assert not repo.mark_failed(session, run.id, "late")
    assert repo.claim_run(session, 999, "w") is None


def test_claim_of_cancelled_queued_run_marks_it_cancelled(session):
    run = _run(session)
    repo.request_cancel(session, run.id)
    session.commit()
    assert repo.get_run(session, run.id, refresh=True).status == "cancelled"
    assert repo.claim_run(session, run.id, "w") is None
    # A queued run that carries a cancel request is never claimed; cancel_queued ends it.
    other = _run(session)
    session.execute(update(Run).where(Run.id == other.id).values(cancel_requested=True))
    assert repo.claim_run(session, other.id, "w") is None and repo.cancel_queued(session, other.id)
    session.commit()
    r = repo.get_run(session, other.id, refresh=True)
    assert (r.status, r.attempts, r.started_at) == ("cancelled", 0, None) and r.finished_at is not None
    with pytest.raises(repo.RunNotFound):
        repo.request_cancel(session, 999)


def test_cancel_running_sets_flag_then_worker_marks_cancelled(session):
    run = _run(session)
    repo.claim_run(session, run.id, "w")
    session.commit()
    r = repo.request_cancel(session, run.id)
    assert (r.status, r.cancel_requested, r.finished_at) == ("running", True, None)
    session.commit()
    assert repo.record_progress(session, run.id, 1, 5) is True
    assert repo.record_progress(session, run.id, worker="w") is True
    assert repo.mark_cancelled(session, run.id, worker="w")
    session.commit()
    assert _status(session, run.id) == "cancelled"
    with pytest.raises(repo.RunConflict):
        repo.request_cancel(session, run.id)


def test_record_progress_on_a_run_not_running_says_lost(session):
    run = _run(session)
    assert repo.record_progress(session, run.id, 1, 5) is None  # queued: not ours
    assert repo.get_run(session, run.id, refresh=True).current_step == 0


def test_mark_failed_keeps_error_text(session):
    run = _run(session)
    repo.claim_run(session, run.id, "w")
    assert repo.mark_failed(session, run.id, "Traceback ...\nValueError: boom")
    r = repo.get_run(session, run.id, refresh=True)
    assert (r.status, r.error) == ("failed", "Traceback ...\nValueError: boom")


@pytest.mark.parametrize("cancel, attempts, fate", [
    (False, 1, "retry"), (False, 2, "retry"), (False, 3, "failed"), (False, 9, "failed"),
    (True, 1, "cancelled"), (True, 3, "cancelled"),
])
def test_orphan_fate_is_cancel_then_fail_then_retry(cancel, attempts, fate):
    assert repo.orphan_fate(cancel, attempts, max_attempts=3) == fate


def test_release_orphan_loses_to_a_change_since_it_read_the_run(session):
    run = _run(session)
    repo.claim_run(session, run.id, "w1")
    session.commit()
    seen = repo.get_run(session, run.id, refresh=True)
    session.expunge(seen)  # the reaper's snapshot, as read in its own transaction
    repo.request_cancel(session, run.id)  # a cancel arrives after the reaper read the run
    session.commit()
    assert repo.release_orphan(session, seen, "gone", max_attempts=3) is None
    session.commit()
    assert _status(session, run.id) == "running"
    fresh = repo.get_run(session, run.id, refresh=True)
    assert repo.release_orphan(session, fresh, "gone", max_attempts=3) == "cancelled"


def _age(session, run_id, seconds):
    session.execute(update(Run).where(Run.id == run_id).values(heartbeat_at=utcnow() - timedelta(seconds=seconds)))
    session.commit()


def test_stale_runs_are_requeued_then_failed_never_left_running(session, db):
    from worker.reaper import recover_stale

    fresh, stale, cancelled = _run(session), _run(session), _run(session)
    for r in (fresh, stale, cancelled):
        repo.claim_run(session, r.id, "w")
    repo.request_cancel(session, cancelled.id)
    session.commit()
    _age(session, stale.id, 120)
    _age(session, cancelled.id, 120)
    assert [r.id for r in repo.stale_runs(session, 60)] == [stale.id, cancelled.id]
    session.commit()  # end the read: the recovery writes from its own transactions
    out = recover_stale(db, 60, max_attempts=2)
    assert out == [(stale.id, "queued"), (cancelled.id, "cancelled")]
    r = repo.get_run(session, stale.id, refresh=True)
    assert (r.status, r.worker, r.heartbeat_at) == ("queued", None, None) and "no heartbeat" in r.error
    repo.claim_run(session, stale.id, "w2")  # attempt 2
    session.commit()
    _age(session, stale.id, 120)
    assert recover_stale(db, 60, max_attempts=2) == [(stale.id, "failed")]
    assert repo.get_run(session, fresh.id, refresh=True).status == "running"
    error = repo.get_run(session, stale.id, refresh=True).error
    assert "no heartbeat for 60 s" in error and "used all 2 attempt(s)" in error


def test_list_runs_filters_and_pages(session):
    a = repo.create_run(session, RunConfig(method="grpo").model_dump(mode="json"), queue="cpu", tags=["x", "y"])
    b = repo.create_run(session, RunConfig(method="aero").model_dump(mode="json"), queue="cpu", tags=["y"])
    c = repo.create_run(session, RunConfig(method="aero").model_dump(mode="json"), queue="cpu", tags=["xy"])
    session.commit()
    repo.claim_run(session, b.id, "w")
    session.commit()
    ids = lambda res: ([r.id for r in res[0]], res[1])  # noqa: E731
    assert ids(repo.list_runs(session)) == ([c.id, b.id, a.id], 3)
    assert ids(repo.list_runs(session, tag="x")) == ([a.id], 1)  # exact tag, not substring
    assert ids(repo.list_runs(session, tag="y")) == ([b.id, a.id], 2)
    assert ids(repo.list_runs(session, method="aero", status="queued")) == ([c.id], 1)
    assert ids(repo.list_runs(session, status=["queued", "running"], limit=1, offset=1)) == ([b.id], 3)


def test_delete_only_finished_runs(session):
    run = _run(session)
    with pytest.raises(repo.RunConflict):
        repo.delete_run(session, run.id)
    repo.request_cancel(session, run.id)
    repo.delete_run(session, run.id)
    session.commit()
    with pytest.raises(repo.RunNotFound):
        repo.get_run(session, run.id)


def test_runs_by_status_counts_every_status(session):
    _run(session), _run(session)
    assert repo.runs_by_status(session) == {"queued": 2, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 0}


def test_waiting_since_is_when_the_wait_began_and_goes_with_waiting_for(session):
    """record_placement: the first waiting_for stamps waiting_since, a changed text (what is free
    now) keeps it, the placement clears both; a waiting run that is cancelled, released to the
    queue or fails waits for nothing either. Waiting runs are listed with status 'waiting' (and
    'running'), counted by runs_waiting, and hold no GPUs in gpus_held until placed."""
    runs = [repo.create_run(session, RunConfig(seed=i).model_dump(mode="json"), queue="gpu", owner="ann", gpus=2)
            for i in range(4)]
    ids = [r.id for r in runs]
    session.commit()
    for rid in ids:
        repo.claim_run(session, rid, "w")
    before = utcnow()
    for rid in ids[1:]:
        assert repo.record_placement(session, rid, "w", waiting_for="2 GPU(s): 0 of the Ray cluster's 2 free")
    session.commit()
    got = lambda rid: repo.get_run(session, rid, refresh=True)  # noqa: E731
    since = got(ids[1]).waiting_since
    assert got(ids[0]).waiting_since is None and since is not None
    assert before - timedelta(seconds=1) <= since <= utcnow() + timedelta(seconds=1)
    assert repo.runs_waiting(session) == 3 and repo.gpus_held(session) == {"ann": 2}
    listed = lambda status: [r.id for r in repo.list_runs(session, status=status)[0]]  # noqa: E731
    assert listed("waiting") == ids[:0:-1] and listed("running") == ids[::-1]
    assert listed(["waiting", "queued"]) == ids[:0:-1]

    session.execute(update(Run).where(Run.id == ids[1]).values(waiting_since=since - timedelta(minutes=5)))
    assert repo.record_placement(session, ids[1], "w", waiting_for="2 GPU(s): 1 of the Ray cluster's 2 free")
    session.commit()
    assert got(ids[1]).waiting_since == since - timedelta(minutes=5)  # the same wait, a new text

    assert repo.record_placement(session, ids[1], "w", waiting_for=None,
                                 placement={"cluster": "own", "gpu_ids": [["0", "1"]]})
    session.commit()
    assert (got(ids[1]).waiting_for, got(ids[1]).waiting_since, got(ids[1]).gpus) == (None, None, 2)
    assert repo.gpus_held(session) == {"ann": 4} and repo.runs_waiting(session) == 2

    repo.request_cancel(session, ids[2])
    assert repo.mark_cancelled(session, ids[2], "w")
    assert repo.release_orphan(session, got(ids[3]), "w vanished", max_attempts=3) == "queued"
    session.commit()
    for rid in ids[2:]:
        assert (got(rid).waiting_for, got(rid).waiting_since) == (None, None), got(rid).status
    assert repo.runs_waiting(session) == 0 and listed("waiting") == []
