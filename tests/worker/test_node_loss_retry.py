"""A run whose attempt loses a node of its Ray cluster (trainer.platform.placement.NodeLost) is retried by
the platform: its worker re-queues it and sends a ticket, the next attempt resumes from the last
checkpoint, and each attempt is visible (the run's attempts and error while queued, a run.retry
audit event). Out of attempts it fails saying so. The engine's node loss is raised by a stand-in
here (losing a real node is the verl suite's two-node test); the store, the worker's code path and
the second attempt's training are real, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from backend.db import audit
from backend.db.session import session_scope
from tests.worker.runs import run_row as get_run
from trainer.platform.placement import NodeLost
from worker.settings import WorkerSettings


def lose_a_node_once(monkeypatch):
    """run_training fails its first call with NodeLost after logging step 1 and checkpointing it
    (what a verl run that loses a node after a checkpoint leaves behind); later calls train."""
    import trainer.platform.run as engines

    real, calls = engines.run_training, {"n": 0}

    def run_training(cfg, out_dir, sink, **kw):
        calls["n"] += 1
        if calls["n"] == 1:
            real(cfg.model_copy(update={"steps": 1}), out_dir, sink, **kw)  # step 1 and its checkpoint
            raise NodeLost("node 127.0.0.2 (Ray node id abc) of the run's 2 nodes left the Ray cluster after step 1")
        return real(cfg, out_dir, sink, **kw)

    monkeypatch.setattr(engines, "run_training", run_training)
    return calls


@pytest.fixture
def tickets(monkeypatch):
    sent: list[tuple[int, str]] = []
    import backend.queue

    monkeypatch.setattr(backend.queue, "enqueue_run", lambda settings, run_id, queue: sent.append((run_id, queue)))
    return sent


def test_a_lost_node_requeues_the_run_and_the_retry_resumes_from_its_checkpoint(db_url, make_run, tmp_path,
                                                                               monkeypatch, tickets):
    from backend.settings import Settings
    from worker.runner import execute_run

    calls = lose_a_node_once(monkeypatch)
    settings = Settings(data_dir=tmp_path, database_url=db_url)
    ws = WorkerSettings(stale_after_s=60.0, heartbeat_s=5.0, max_attempts=3)
    rid = make_run(steps=3, checkpoint_every=1)
    assert execute_run(rid, settings, ws) == "retry"
    r = get_run(db_url, rid)
    assert (r.status, r.attempts, r.worker) == ("queued", 1, None)
    assert r.error.startswith("re-queued: attempt 1 lost a node: node 127.0.0.2") and tickets == [(rid, r.queue)]
    with session_scope(db_url) as s:
        events, _ = audit.list_events(s, action=["run.retry"], target=f"run:{rid}")
        assert [(e.before["attempt"], e.after["status"]) for e in events] == [(1, "queued")]
    # the ticket's delivery: the second attempt resumes after step 1 and completes
    assert execute_run(rid, settings, ws) == "succeeded" and calls["n"] == 2
    r = get_run(db_url, rid)
    assert (r.status, r.attempts, r.current_step, r.error) == ("succeeded", 2, 3, None)
    from backend.db.metrics import step_count

    with session_scope(db_url) as s:
        assert step_count(s, rid) == (3, 3)  # steps 1..3, each stored once


def test_out_of_attempts_a_lost_node_fails_the_run_saying_so(db_url, make_run, tmp_path, monkeypatch, tickets):
    from backend.settings import Settings
    from worker.runner import execute_run

    lose_a_node_once(monkeypatch)
    ws = WorkerSettings(stale_after_s=60.0, heartbeat_s=5.0, max_attempts=1)
    rid = make_run(steps=3, checkpoint_every=1)
    assert execute_run(rid, Settings(data_dir=tmp_path, database_url=db_url), ws) == "failed"
    r = get_run(db_url, rid)
    assert r.status == "failed" and tickets == []
    assert "NodeLost: node 127.0.0.2" in r.error and "lost a node on 1 attempt(s); AERO_MAX_ATTEMPTS=1" in r.error
