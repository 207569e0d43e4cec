"""Reaper: orphaned running runs are re-queued and re-sent, failed, or cancelled; live ones are kept."""

from __future__ import annotations

import socket

import pytest
import subprocess
from datetime import timedelta

from sqlalchemy import update

from backend.db.models import Run, utcnow
from backend.db.session import session_scope
from worker.claim import worker_identity
from worker.reaper import Reaper
from worker.settings import WorkerSettings

WS = WorkerSettings(stale_after_s=30.0, max_attempts=3)


def dead_worker() -> str:
    p = subprocess.Popen(["true"])
    p.wait()
    return f"{socket.gethostname()}:{p.pid}:1"


def running(url, rid, **values):
    with session_scope(url) as s:
        s.execute(update(Run).where(Run.id == rid).values(status="running", started_at=utcnow(), **values))


def status_of(url, rid):
    with session_scope(url) as s:
        r = s.get(Run, rid)
        return r.status, r.worker, r.heartbeat_at, r.error


def make_reaper(db_url, sent, fail_times=0):
    from backend.settings import Settings

    calls = {"n": 0}

    def enqueue(run_id):
        calls["n"] += 1
        if calls["n"] <= fail_times:
            raise ConnectionError("broker down")
        sent.append(run_id)

    return Reaper(Settings(database_url=db_url), WS, enqueue=enqueue)


def test_stale_heartbeat_is_requeued_and_resent(db_url, make_run):
    old = utcnow() - timedelta(seconds=31)
    stale, fresh, live_local = make_run(), make_run(), make_run()
    running(db_url, stale, worker="remote:1:1", heartbeat_at=old, attempts=1)
    running(db_url, fresh, worker="remote:2:2", heartbeat_at=utcnow(), attempts=1)
    running(db_url, live_local, worker=worker_identity(), heartbeat_at=utcnow(), attempts=1)
    sent = []
    changed = make_reaper(db_url, sent).sweep()
    assert changed == [(stale, "queued")] and sent == [stale]
    st, worker, hb, err = status_of(db_url, stale)
    assert st == "queued" and worker is None and hb is None and "remote:1:1" in err
    assert status_of(db_url, fresh)[0] == status_of(db_url, live_local)[0] == "running"


def test_dead_local_owner_is_recovered_without_waiting_for_the_timeout(db_url, make_run):
    rid = make_run()
    dead = dead_worker()
    running(db_url, rid, worker=dead, heartbeat_at=utcnow(), attempts=1)
    sent = []
    assert make_reaper(db_url, sent).sweep() == [(rid, "queued")] and sent == [rid]
    assert f"worker process {dead} died" in status_of(db_url, rid)[3]


def test_out_of_attempts_fails_and_cancel_requested_cancels(db_url, make_run):
    spent, spent_local, cancel = make_run(), make_run(), make_run()
    running(db_url, spent, worker="remote:1:1", heartbeat_at=utcnow() - timedelta(seconds=60), attempts=3)
    running(db_url, spent_local, worker=dead_worker(), heartbeat_at=utcnow(), attempts=3)
    running(db_url, cancel, worker=dead_worker(), heartbeat_at=utcnow(), attempts=1, cancel_requested=True)
    sent = []
    changed = dict(make_reaper(db_url, sent).sweep())
    assert changed == {spent: "failed", spent_local: "failed", cancel: "cancelled"} and sent == []
    error = status_of(db_url, spent)[3]
    assert "no heartbeat for 30 s" in error and "used all 3 attempt(s)" in error
    assert "used all 3 attempt(s)" in status_of(db_url, spent_local)[3]


def test_unsent_task_is_retried_next_sweep(db_url, make_run):
    rid = make_run()
    running(db_url, rid, worker=dead_worker(), heartbeat_at=utcnow(), attempts=1)
    sent = []
    reaper = make_reaper(db_url, sent, fail_times=1)
    assert reaper.sweep() == [(rid, "queued")] and sent == [] and reaper.unsent == {rid}
    assert reaper.sweep() == [] and sent == [rid] and reaper.unsent == set()


def test_a_frozen_writer_holding_the_row_lock_neither_hangs_the_reaper_nor_keeps_the_run(pg_url, monkeypatch):
    # A worker frozen (SIGSTOP, a paused VM) between its heartbeat UPDATE and the COMMIT holds the
    # run's row lock. The reaper gives up on that row after LOCK_WAIT_S and still releases the other
    # orphan; PostgreSQL ends the frozen transaction after AERO_DB_IDLE_TX_TIMEOUT_S, and the next
    # sweep re-queues the run. (The e2e frozen-worker test hit this hang about one run in fifty.)
    import time

    from sqlalchemy import text

    import worker.reaper as reaper_mod
    from backend.db.runs import create_run
    from backend.db.session import make_engine

    from .conftest import tiny_config

    with session_scope(pg_url) as s:
        frozen, other = (create_run(s, tiny_config(), queue="cpu").id for _ in range(2))
    old = utcnow() - timedelta(seconds=31)
    running(pg_url, frozen, worker="remote:1:1", heartbeat_at=old, attempts=1)
    running(pg_url, other, worker="remote:2:2", heartbeat_at=old, attempts=1)
    monkeypatch.setattr(reaper_mod, "LOCK_WAIT_S", 0.5)
    monkeypatch.setenv("AERO_DB_IDLE_TX_TIMEOUT_S", "3")
    holder_engine = make_engine(pg_url)
    holder = holder_engine.connect()
    holder.execute(text("UPDATE runs SET heartbeat_at = now() WHERE id = :id"), {"id": frozen})  # never committed
    t0 = time.monotonic()
    sent: list[int] = []
    reaper = make_reaper(pg_url, sent)
    assert reaper.sweep() == [(other, "queued")] and sent == [other]
    assert time.monotonic() - t0 < 2.5  # gave up on the locked row after ~0.5 s
    assert status_of(pg_url, frozen)[0] == "running"
    deadline = time.monotonic() + 15
    while (changed := reaper.sweep()) == [] and time.monotonic() < deadline:
        time.sleep(0.25)
    assert changed == [(frozen, "queued")] and sent == [other, frozen]
    assert 2.5 < time.monotonic() - t0 < 10  # the server ended the idle transaction after ~3 s
    with pytest.raises(Exception):  # the frozen writer's transaction is gone: its commit cannot land
        holder.commit()
    holder_engine.dispose()
