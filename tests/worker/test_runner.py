"""The train_run task once it owns its run (worker/runner.py): progress, cancel, lost ownership,
the outcome and store outages, on SQLite and PostgreSQL. Claiming the run: test_claim.py."""

from __future__ import annotations

import socket

import pytest
from sqlalchemy.exc import OperationalError

from tests.worker.runs import dead_pid, run_row as get_run, set_run
from worker.claim import acquire, worker_identity
from worker.runner import RunControl, RunLost, error_text
from worker.settings import WorkerSettings

WS = WorkerSettings(stale_after_s=60.0, heartbeat_s=5.0, max_attempts=3)


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
    # drops it (benchmarks/soak/, PostgreSQL restarted under two workers): the run sat "running"
    # with no trainer until the reaper's stale timeout. The owner resumes it itself instead. A
    # stand-in trainer raises the outage's error here; benchmarks/soak/ restarts the real
    # PostgreSQL under real workers (and tests/worker/test_soak_short.py restarts Redis and the API).
    import trainer.platform.run
    from backend.settings import Settings
    from worker import runner

    calls = []

    def run_training(cfg, out_dir, sink, **kw):
        calls.append(get_run(db_url, rid).worker)
        if len(calls) == 1:
            raise _store_outage()
        return {"status": "completed", "last_step": cfg.steps}

    rid = make_run()
    monkeypatch.setattr(trainer.platform.run, "run_training", run_training)
    outcome = runner.execute_run(rid, Settings(data_dir=tmp_path, database_url=db_url), WS)
    r = get_run(db_url, rid)
    assert outcome == "succeeded" and r.status == "succeeded" and r.attempts == 2
    assert calls == [worker_identity(), worker_identity()]  # both times here, as the run's owner


def test_a_store_still_down_after_the_wait_raises_for_celerys_retry_and_the_run_stays_owned(db_url, make_run, tmp_path,
                                                                                              monkeypatch):
    import trainer.platform.run
    from backend.settings import Settings
    from worker import runner

    def run_training(cfg, out_dir, sink, **kw):
        raise _store_outage()

    rid = make_run()
    monkeypatch.setattr(trainer.platform.run, "run_training", run_training)
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
