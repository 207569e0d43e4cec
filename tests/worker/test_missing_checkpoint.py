"""A run resumed on a host whose run directory does not hold the store's newest checkpoint
(worker/runner.py ``reconcile_checkpoints``, AERO_MISSING_CHECKPOINT), on SQLite and PostgreSQL:
with ``restart`` the store keeps one attempt (nothing past the step this host resumes from),
with ``fail`` the run fails naming the host and the path."""

from __future__ import annotations

import logging
import shutil
import time
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from backend.db.metrics import list_checkpoints, list_evals
from backend.db.models import Run, StepMetric, utcnow
from backend.db.rollouts import detail_steps
from backend.db.session import session_scope
from backend.settings import Settings
from tests.worker.conftest import tiny_config
from tests.worker.test_sink import EVAL
from tests.worker.test_sink_details import detail
from worker.claim import acquire
from worker.runner import MissingCheckpoint, RunLost, execute_run, reconcile_checkpoints, run_dir
from worker.settings import WorkerSettings
from worker.sink import DbSink

WS = WorkerSettings(stale_after_s=60.0, heartbeat_s=5.0, max_attempts=3)
OTHER = "other-host:4242:777"  # the worker that had the run, on a host that does not share the run directory


def plant_attempt(url: str, rid: int, last: int = 4) -> str:
    """The store as an earlier attempt on OTHER left it: steps 1..last with their rollout samples,
    evals and checkpoint records at every even step. Returns the newest checkpoint's path."""
    sink = DbSink(url, rid, background=False)
    path = ""
    for step in range(1, last + 1):
        sink.log(step, {"reward/mean": 100.0 + step})
        sink.log_detail(step, detail(1))
        if step % 2 == 0:
            sink.log_eval(step, EVAL)
            path = f"/srv/aero/runs/{rid}/checkpoints/step_{step:06d}"
            sink.on_checkpoint(step, path)
    sink.close()
    return path


def orphan(url: str, rid: int) -> None:
    """Running, owned by OTHER, whose heartbeat stopped: the next delivery takes it over."""
    with session_scope(url) as s:
        s.execute(update(Run).where(Run.id == rid).values(status="running", worker=OTHER, attempts=1, current_step=4,
                                                          heartbeat_at=utcnow() - timedelta(seconds=600)))


def stored(url: str, rid: int) -> dict:
    with session_scope(url) as s:
        return {"steps": list(s.scalars(select(StepMetric.step).where(StepMetric.run_id == rid).order_by(StepMetric.step))),
                "evals": sorted({e.step for e in list_evals(s, rid)}), "details": detail_steps(s, rid),
                "checkpoints": [c.step for c in list_checkpoints(s, rid)],
                "current_step": s.get(Run, rid).current_step}


@pytest.fixture(scope="module")
def embedded_checkpoint(tmp_path_factory):
    """A real run directory with the embedded engine's checkpoint of step 2 (a tiny 2-step run)."""
    from trainer.spec.config import parse_run_config
    from trainer.platform.run import run_training
    from trainer.platform.sinks import JsonlSink

    out = tmp_path_factory.mktemp("trained")
    cfg = parse_run_config(tiny_config(steps=2, checkpoint_every=2))
    run_training(cfg, out, JsonlSink(out))
    assert (out / "checkpoints" / "latest").read_text().strip() == "step_000002"
    return out


def take_over(url: str, rid: int):
    run, why = acquire(url, rid, "me-host:1:1", WS, sleep=lambda s: pytest.fail("must not wait"))
    assert run is not None and run.attempts == 2 and OTHER in why
    return run, why


def test_restart_without_a_checkpoint_here_leaves_nothing_past_step_0(db_url, make_run, tmp_path, caplog):
    rid = make_run()
    path = plant_attempt(db_url, rid)
    orphan(db_url, rid)
    run, why = take_over(db_url, rid)
    with caplog.at_level(logging.WARNING, logger="worker.runner"):
        here = reconcile_checkpoints(db_url, run, 4, tmp_path / str(rid), "me-host:1:1", why, "restart")
    assert here == 0
    assert stored(db_url, rid) == {"steps": [], "evals": [], "details": [], "checkpoints": [], "current_step": 0}
    warning = caplog.text
    assert "step 4" in warning and path in warning and OTHER in warning and "restarting from step 0" in warning


def test_restart_keeps_the_rows_up_to_this_hosts_checkpoint(db_url, make_run, tmp_path, embedded_checkpoint):
    rid = make_run()
    plant_attempt(db_url, rid)
    orphan(db_url, rid)
    out = tmp_path / str(rid)
    shutil.copytree(embedded_checkpoint, out)  # this host holds the checkpoint of step 2, the store one of step 4
    run, why = take_over(db_url, rid)
    assert reconcile_checkpoints(db_url, run, 4, out, "me-host:1:1", why, "restart") == 2
    assert stored(db_url, rid) == {"steps": [1, 2], "evals": [2], "details": [1, 2], "checkpoints": [2],
                                   "current_step": 2}


def test_nothing_to_do_when_this_host_has_the_newest_checkpoint(db_url, make_run, tmp_path, embedded_checkpoint):
    rid = make_run()
    plant_attempt(db_url, rid, last=2)
    orphan(db_url, rid)
    out = tmp_path / str(rid)
    shutil.copytree(embedded_checkpoint, out)
    run, why = take_over(db_url, rid)
    before = stored(db_url, rid)
    for mode in ("fail", "restart"):
        assert reconcile_checkpoints(db_url, run, 4, out, "me-host:1:1", why, mode) == 2
    assert stored(db_url, rid) == before


def test_a_worker_that_lost_the_run_deletes_nothing(db_url, make_run, tmp_path):
    rid = make_run()
    plant_attempt(db_url, rid)
    orphan(db_url, rid)
    run, why = take_over(db_url, rid)
    with session_scope(db_url) as s:  # the reaper re-queued it meanwhile
        s.execute(update(Run).where(Run.id == rid).values(status="queued", worker=None))
    with pytest.raises(RunLost):
        reconcile_checkpoints(db_url, run, 4, tmp_path / str(rid), "me-host:1:1", why, "restart")
    assert stored(db_url, rid)["steps"] == [1, 2, 3, 4]


def test_fail_ends_the_run_failed_naming_the_host_and_the_path(db_url, make_run, tmp_path):
    settings = Settings(data_dir=tmp_path, database_url=db_url)
    rid = make_run()
    path = plant_attempt(db_url, rid)
    orphan(db_url, rid)
    ws = WorkerSettings(stale_after_s=60.0, heartbeat_s=5.0, max_attempts=3, missing_checkpoint="fail")
    assert execute_run(rid, settings, ws) == "failed"
    with session_scope(db_url) as s:
        r = s.get(Run, rid)
        assert r.status == "failed" and r.finished_at is not None
        error = r.error
    head = error.splitlines()[0]
    assert head.startswith(f"{MissingCheckpoint.__name__}: run {rid}: the store's newest checkpoint, step 4 at {path}")
    assert "other-host" in head and OTHER in head and str(run_dir(settings, rid)) in head
    assert "AERO_MISSING_CHECKPOINT=restart" in head and "docs/deploy.md" in head
    # nothing was deleted: the operator shares the run directory and resumes the run from step 4
    assert stored(db_url, rid)["steps"] == [1, 2, 3, 4] and stored(db_url, rid)["checkpoints"] == [2, 4]


def test_restart_through_the_worker_trains_one_attempt(db_url, make_run, tmp_path):
    # the whole task: taken over on a host with an empty run directory, the run trains from step 0
    # and the store holds its 4 steps, none of the earlier attempt's rows
    settings = Settings(data_dir=tmp_path, database_url=db_url)
    rid = make_run()
    plant_attempt(db_url, rid, last=6)
    orphan(db_url, rid)
    t0 = utcnow()
    time.sleep(0.01)
    assert execute_run(rid, settings, WS) == "succeeded"
    with session_scope(db_url) as s:
        rows = list(s.execute(select(StepMetric.step, StepMetric.logged_at)
                              .where(StepMetric.run_id == rid).order_by(StepMetric.step)))
        assert [c.step for c in list_checkpoints(s, rid)] == [2, 4]
        assert all(c.path.startswith(str(run_dir(settings, rid))) for c in list_checkpoints(s, rid))
        evals = list_evals(s, rid)  # the final evaluation's, none of the planted ones (steps 2, 4, 6)
        assert {e.step for e in evals} == {4} and all(e.logged_at > t0 for e in evals)
        assert detail_steps(s, rid) == [1, 2, 3, 4]
    assert [r.step for r in rows] == [1, 2, 3, 4] and all(r.logged_at > t0 for r in rows)


def test_the_setting_is_checked_where_the_worker_starts(monkeypatch):
    monkeypatch.delenv("AERO_MISSING_CHECKPOINT", raising=False)
    # the default: a one-node run restarts from what its host has, a multi-node run fails
    ws = WorkerSettings()
    assert ws.missing_checkpoint == "auto"
    assert (ws.missing_checkpoint_mode(1), ws.missing_checkpoint_mode(2)) == ("restart", "fail")
    monkeypatch.setenv("AERO_MISSING_CHECKPOINT", " FAIL ")
    assert WorkerSettings().missing_checkpoint_mode(1) == "fail"
    monkeypatch.setenv("AERO_MISSING_CHECKPOINT", "restart")
    assert WorkerSettings().missing_checkpoint_mode(4) == "restart"  # the operator's word wins
    monkeypatch.setenv("AERO_MISSING_CHECKPOINT", "resume")
    with pytest.raises(ValueError, match="AERO_MISSING_CHECKPOINT must be one of auto, restart, fail"):
        WorkerSettings()
