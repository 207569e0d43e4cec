"""Ownership and state guards of the train_run task (worker/runner.py), on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import socket
import subprocess
from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlalchemy.exc import OperationalError

from backend.db.models import Run, utcnow
from backend.db.session import session_scope
from worker.runner import RunControl, RunLost, acquire, decide, error_text, owner_state, worker_identity
from worker.settings import WorkerSettings

WS = WorkerSettings(stale_after_s=60.0, heartbeat_s=5.0, max_attempts=3)


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def set_run(url: str, run_id: int, **values) -> None:
    with session_scope(url) as s:
        s.execute(update(Run).where(Run.id == run_id).values(**values))


def get_run(url: str, run_id: int) -> Run:
    with session_scope(url) as s:
        return s.get(Run, run_id)


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


# ---------------------------------------------------------------- while running


def test_run_control_progress_cancel_and_lost_ownership(db_url, make_run):
    rid = make_run()
    run, _ = acquire(db_url, rid, "me:1:1", WS)
    ctl = RunControl(db_url, rid, "me:1:1")
    kicks = []
    ctl.kick = lambda: kicks.append(1)  # the heartbeat thread's wake-up
    assert ctl.should_stop() is False
    ctl.progress(2, 4, {})
    assert kicks == [1] and get_run(db_url, rid).current_step == 0  # progress itself does not write
    before = get_run(db_url, rid).heartbeat_at
    ctl.beat()  # what the heartbeat thread runs when kicked
    r = get_run(db_url, rid)
    assert (r.current_step, r.total_steps, r.progress) == (2, 4, 0.5) and r.heartbeat_at > before
    set_run(db_url, rid, cancel_requested=True)
    assert ctl.should_stop() is True and not ctl.lost  # read at the next step boundary
    set_run(db_url, rid, worker="thief:9:9")
    with pytest.raises(RunLost):  # ends the trainer at once: no stop checkpoint in the new owner's dir
        ctl.should_stop()
    ctl.lost = False
    ctl.progress(3, 4, {})
    ctl.beat()  # a beat that finds another owner writes nothing and marks the run lost
    assert ctl.lost and get_run(db_url, rid).current_step == 2
    with pytest.raises(RunLost):
        ctl.progress(4, 4, {})


def test_a_beat_the_store_refused_is_written_by_the_next_beat(db_url, make_run, tmp_path):
    # Found by the soak: a PostgreSQL restart failed the beat that carried a run's last step, the
    # values were dropped, and the run succeeded with its row at step 3 of 4.
    rid = make_run()
    acquire(db_url, rid, "me:1:1", WS)
    ctl = RunControl(db_url, rid, "me:1:1")
    ctl.kick = lambda: None
    ctl.progress(3, 4, {})
    ctl.url = f"sqlite:///{tmp_path / 'no-such-dir' / 'store.sqlite'}"  # a store that cannot be reached
    with pytest.raises(OperationalError):
        ctl.beat()
    ctl.url = db_url
    ctl.beat()  # the final beat (execute_run) or the heartbeat's next one
    r = get_run(db_url, rid)
    assert (r.current_step, r.progress) == (3, 0.75)
    ctl.progress(4, 4, {})
    ctl.url = f"sqlite:///{tmp_path / 'no-such-dir' / 'store.sqlite'}"
    with pytest.raises(OperationalError):
        ctl.beat()
    ctl.progress(5, 5, {})  # a newer step while the store was away wins over the refused one
    ctl.url = db_url
    ctl.beat()
    assert get_run(db_url, rid).current_step == 5


def test_queued_run_with_a_cancel_request_is_cancelled_not_started(db_url, make_run):
    assert _d(status="queued", cancel=True) == "cancel"
    rid = make_run()
    set_run(db_url, rid, cancel_requested=True)
    run, why = acquire(db_url, rid, "me:1:1", WS)
    r = get_run(db_url, rid)
    assert run is None and "before it started" in why and (r.status, r.attempts, r.worker) == ("cancelled", 0, None)


def test_error_text_keeps_the_message_and_the_traceback_tail():
    try:
        raise ValueError("x" * 10 + " boom")
    except ValueError as e:
        text = error_text(e)
    assert text.startswith("ValueError: xxxxxxxxxx boom") and "Traceback" in text and "raise ValueError" in text


def test_execute_run_marks_a_failing_run_failed_with_its_error(db_url, make_run, tmp_path):
    from backend.settings import Settings
    from worker.runner import execute_run

    rid = make_run(preset=None, model_path=str(tmp_path / "no-such-model"))
    outcome = execute_run(rid, Settings(data_dir=tmp_path, database_url=db_url), WS)
    r = get_run(db_url, rid)
    assert outcome == "failed" and r.status == "failed" and r.finished_at is not None and r.attempts == 1
    assert r.error.startswith("ConfigError: model_path:") and "Traceback" in r.error
    # A redelivered message for it is a no-op: the run stays failed, and nothing else is queued.
    assert execute_run(rid, Settings(data_dir=tmp_path, database_url=db_url), WS).startswith("skipped: no queued run")
    assert get_run(db_url, rid).attempts == 1


def test_a_run_resumed_at_its_last_checkpoint_succeeds_with_its_row_at_the_last_step(db_url, make_run, tmp_path):
    # Found by the soak: a worker SIGKILLed after the last step's checkpoint, before the run was
    # marked; the next worker resumed at the last step, trained nothing, reported no progress, and
    # the run succeeded with its row at step 3 of 4.
    from backend.settings import Settings
    from worker.runner import execute_run

    settings = Settings(data_dir=tmp_path, database_url=db_url)
    rid = make_run(steps=2)
    assert execute_run(rid, settings, WS) == "succeeded"
    # as the killed worker left it: running, owned by a dead process, the row one step behind
    set_run(db_url, rid, status="running", current_step=1, progress=0.5, finished_at=None,
            worker=f"{socket.gethostname()}:{dead_pid()}:1")
    assert execute_run(rid, settings, WS) == "succeeded"
    r = get_run(db_url, rid)
    assert (r.status, r.current_step, r.total_steps, r.progress, r.attempts) == ("succeeded", 2, 2, 1.0, 2)


def _store_outage() -> Exception:
    from sqlalchemy.exc import OperationalError

    return OperationalError("UPDATE runs ...", {}, Exception("terminating connection due to administrator command"))


def test_a_store_outage_mid_run_is_resumed_by_the_process_that_owns_the_run(db_url, make_run, tmp_path, monkeypatch):
    # A Celery retry goes to any worker, and any other one sees this live process as the owner and
    # drops it (benchmarks/soak.py, PostgreSQL restarted under two workers): the run sat "running"
    # with no trainer until the reaper's stale timeout. The owner resumes it itself instead. A
    # stand-in trainer raises the outage's error here; benchmarks/soak.py restarts the real
    # PostgreSQL under real workers (and tests/worker/test_soak_short.py restarts Redis and the API).
    import trainer.engines
    from backend.settings import Settings
    from worker import runner

    calls = []

    def run_training(cfg, out_dir, sink, **kw):
        calls.append(get_run(db_url, rid).worker)
        if len(calls) == 1:
            raise _store_outage()
        return {"status": "completed", "last_step": cfg.steps}

    rid = make_run()
    monkeypatch.setattr(trainer.engines, "run_training", run_training)
    outcome = runner.execute_run(rid, Settings(data_dir=tmp_path, database_url=db_url), WS)
    r = get_run(db_url, rid)
    assert outcome == "succeeded" and r.status == "succeeded" and r.attempts == 2
    assert calls == [worker_identity(), worker_identity()]  # both times here, as the run's owner


def test_a_store_still_down_after_the_wait_raises_for_celerys_retry_and_the_run_stays_owned(db_url, make_run, tmp_path,
                                                                                              monkeypatch):
    import trainer.engines
    from backend.settings import Settings
    from worker import runner

    def run_training(cfg, out_dir, sink, **kw):
        raise _store_outage()

    rid = make_run()
    monkeypatch.setattr(trainer.engines, "run_training", run_training)
    monkeypatch.setattr(runner, "wait_for_store", lambda url: False)
    with pytest.raises(Exception, match="terminating connection"):
        runner.execute_run(rid, Settings(data_dir=tmp_path, database_url=db_url), WS)
    r = get_run(db_url, rid)
    assert r.status == "running" and r.worker == worker_identity()  # the retry (or the reaper) resumes it


def test_wait_for_store_probes_until_the_store_answers_or_the_time_is_up(sqlite_url):
    from worker.runner import wait_for_store

    slept = []
    assert wait_for_store(sqlite_url, 5, slept.append) and slept == []
    bad = "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=1"
    assert not wait_for_store(bad, 0.2, slept.append) and slept and all(s <= 0.5 for s in slept)
