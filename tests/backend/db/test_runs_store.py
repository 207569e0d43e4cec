"""The run state machine and repository functions, on SQLite and PostgreSQL."""

from datetime import timedelta

import pytest
from sqlalchemy import update

from backend.db import runs as repo
from backend.db.models import RUN_STATUSES, Run, utcnow
from trainer.config import RunConfig

ALLOWED = {
    ("queued", "running"), ("queued", "cancelled"), ("queued", "failed"),
    ("running", "running"), ("running", "succeeded"), ("running", "failed"), ("running", "cancelled"), ("running", "queued"),
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


@pytest.mark.parametrize("src", RUN_STATUSES)
def test_transition_guard_in_the_database(session, src):
    run = _run(session)
    for dst in RUN_STATUSES:
        _force(session, run.id, src)
        if (src, dst) in ALLOWED:
            assert repo.transition(session, run.id, dst).status == dst
        else:
            with pytest.raises(repo.InvalidTransition) as e:
                repo.transition(session, run.id, dst)
            assert (e.value.src, e.value.dst) == (src, dst)
        session.commit()


def test_claim_lifecycle_and_redelivery(session):
    run = _run(session, steps=10)
    assert (run.status, run.attempts, run.started_at) == ("queued", 0, None)
    claimed = repo.claim_run(session, run.id, "w1")
    assert (claimed.status, claimed.attempts, claimed.worker) == ("running", 1, "w1")
    started = claimed.started_at
    assert started is not None and claimed.heartbeat_at is not None
    session.commit()
    again = repo.claim_run(session, run.id, "w2")  # a redelivered task takes it over
    assert (again.status, again.attempts, again.worker, again.started_at) == ("running", 2, "w2", started)
    assert repo.record_progress(session, run.id, 4, 10) is False
    session.commit()
    r = repo.get_run(session, run.id, refresh=True)
    assert (r.current_step, r.progress) == (4, pytest.approx(0.4))
    done = repo.mark_succeeded(session, run.id)
    assert (done.status, done.progress) == ("succeeded", 1.0) and done.finished_at is not None
    session.commit()
    assert repo.claim_run(session, run.id, "w3") is None  # finished: nothing to do
    with pytest.raises(repo.InvalidTransition):
        repo.mark_failed(session, run.id, "late")


def test_claim_of_cancelled_queued_run_marks_it_cancelled(session):
    run = _run(session)
    repo.request_cancel(session, run.id)
    session.commit()
    assert repo.get_run(session, run.id, refresh=True).status == "cancelled"
    assert repo.claim_run(session, run.id, "w") is None
    with pytest.raises(repo.RunNotFound):
        repo.claim_run(session, 999, "w")


def test_cancel_running_sets_flag_then_worker_marks_cancelled(session):
    run = _run(session)
    repo.claim_run(session, run.id, "w")
    session.commit()
    r = repo.request_cancel(session, run.id)
    assert (r.status, r.cancel_requested) == ("running", True)
    session.commit()
    assert repo.record_progress(session, run.id, 1, 5) is True
    assert repo.heartbeat(session, run.id) is True and repo.is_cancel_requested(session, run.id)
    assert repo.mark_cancelled(session, run.id).status == "cancelled"
    session.commit()
    with pytest.raises(repo.RunConflict):
        repo.request_cancel(session, run.id)


def test_record_progress_on_a_run_not_running_says_stop(session):
    run = _run(session)
    assert repo.record_progress(session, run.id, 1, 5) is True  # queued: not ours
    assert repo.get_run(session, run.id, refresh=True).current_step == 0


def test_mark_failed_keeps_error_text(session):
    run = _run(session)
    repo.claim_run(session, run.id, "w")
    r = repo.mark_failed(session, run.id, "Traceback ...\nValueError: boom")
    assert (r.status, r.error) == ("failed", "Traceback ...\nValueError: boom")


def _age(session, run_id, seconds):
    session.execute(update(Run).where(Run.id == run_id).values(heartbeat_at=utcnow() - timedelta(seconds=seconds)))
    session.commit()


def test_stale_runs_are_requeued_then_failed_never_left_running(session):
    fresh, stale, cancelled = _run(session), _run(session), _run(session)
    for r in (fresh, stale, cancelled):
        repo.claim_run(session, r.id, "w")
    repo.request_cancel(session, cancelled.id)
    session.commit()
    _age(session, stale.id, 120)
    _age(session, cancelled.id, 120)
    assert [r.id for r in repo.stale_runs(session, 60)] == [stale.id, cancelled.id]
    out = repo.recover_stale_runs(session, 60, max_attempts=2)
    session.commit()
    assert out == [(stale.id, "queued"), (cancelled.id, "cancelled")]
    r = repo.get_run(session, stale.id, refresh=True)
    assert (r.status, r.worker, r.heartbeat_at) == ("queued", None, None) and "no heartbeat" in r.error
    repo.claim_run(session, stale.id, "w2")  # attempt 2
    session.commit()
    _age(session, stale.id, 120)
    assert repo.recover_stale_runs(session, 60, max_attempts=2) == [(stale.id, "failed")]
    assert repo.get_run(session, fresh.id, refresh=True).status == "running"
    assert "after 2 attempt(s)" in repo.get_run(session, stale.id, refresh=True).error


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
