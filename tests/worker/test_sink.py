"""DbSink: buffered, batched, idempotent on (run, step); flush policy; resume truncation."""

from __future__ import annotations

import math

import pytest

from backend.db.metrics import list_evals, read_step_metrics, step_count
from backend.db.session import session_scope
from worker.sink import DbSink


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def stored(url, run_id):
    with session_scope(url) as s:
        cols = read_step_metrics(s, run_id, keys=["loss/policy"])
        return cols.steps, cols.series["loss/policy"]


EVAL = {"arith": {"n": 4, "k": 1, "avg_at_k": 0.5, "pass_at_k": 0.5, "avg_ci": [0.1, 0.9], "pass_ci": [0.1, 0.9],
                  "per_problem": [[1, 1], [1, 0], [1, 1], [1, 0]]}}


def test_buffers_until_a_checkpoint_or_the_interval(db_url, make_run):
    rid, clock = make_run(), Clock()
    sink = DbSink(db_url, rid, flush_s=10.0, clock=clock, background=False)
    sink.log(1, {"loss/policy": 1.0})
    sink.log(2, {"loss/policy": 2.0})
    assert stored(db_url, rid) == ([], []) and sink.flushes == 0
    clock.t = 10.0  # interval elapsed: steps 1..3 go out in one statement
    sink.log(3, {"loss/policy": 3.0})
    assert stored(db_url, rid) == ([1, 2, 3], [1.0, 2.0, 3.0]) and sink.flushes == 1
    sink.log(4, {"loss/policy": 4.0})
    assert stored(db_url, rid)[0] == [1, 2, 3] and sink.flushes == 1
    sink.before_checkpoint(4)  # the loop announces a checkpoint: durable before it is written
    assert stored(db_url, rid)[0] == [1, 2, 3, 4] and sink.flushes == 2
    sink.log(5, {"loss/policy": 5.0})
    sink.close()
    assert stored(db_url, rid)[0] == [1, 2, 3, 4, 5]
    assert sink.stats()["rows"] == 5 and sink.stats()["write_s"] > 0 and sink.stats()["blocked_s"] >= sink.stats()["write_s"]


def test_relogged_steps_are_stored_once_with_latest_values(db_url, make_run):
    rid = make_run()
    sink = DbSink(db_url, rid, flush_s=0.0, background=False)
    for step in (1, 2, 3):
        sink.log(step, {"loss/policy": float(step), "x": 1})
    # A resumed run (checkpoint at 1) re-logs 2 and 3 with new values and goes on.
    resumed = DbSink(db_url, rid, flush_s=0.0, background=False)
    for step in (2, 3, 4):
        resumed.log(step, {"loss/policy": 10.0 * step})
    with session_scope(db_url) as s:
        assert step_count(s, rid) == (4, 4)
    assert stored(db_url, rid) == ([1, 2, 3, 4], [1.0, 20.0, 30.0, 40.0])


def test_truncate_after_drops_the_lost_future_and_non_finite_values_become_null(db_url, make_run):
    rid = make_run()
    sink = DbSink(db_url, rid, flush_s=0.0, background=False)
    for step in (1, 2, 3):
        sink.log(step, {"loss/policy": math.nan if step == 2 else 1.0})
    sink.log_eval(2, EVAL)
    sink.log_eval(3, EVAL)
    resumed = DbSink(db_url, rid, flush_s=0.0, background=False)
    resumed.truncate_after(2)
    assert stored(db_url, rid) == ([1, 2], [1.0, None])
    with session_scope(db_url) as s:
        evals = list_evals(s, rid)
        assert [(e.step, e.benchmark, e.per_problem) for e in evals] == [(2, "arith", EVAL["arith"]["per_problem"])]


def test_eval_flushes_pending_steps_first(db_url, make_run):
    rid = make_run()
    sink = DbSink(db_url, rid, flush_s=1e9)
    sink.log(1, {"loss/policy": 1.0})
    sink.log_eval(1, EVAL)
    sink.log_eval(1, EVAL)  # idempotent on (run, step, benchmark)
    assert stored(db_url, rid)[0] == [1]
    with session_scope(db_url) as s:
        assert len(list_evals(s, rid)) == 1


@pytest.mark.timing  # compares two wall-clock spans: a loaded core beside it skews the ratio (failed once so)
def test_background_writes_keep_the_training_thread_unblocked_and_close_drains(db_url, make_run):
    rid, clock = make_run(), Clock()
    sink = DbSink(db_url, rid, flush_s=0.0, clock=clock)
    for step in range(1, 51):
        sink.log(step, {"loss/policy": float(step)})
    blocked_while_training = sink.blocked_s
    sink.close()
    steps, values = stored(db_url, rid)
    assert steps == list(range(1, 51)) and values == [float(s) for s in steps]
    st = sink.stats()
    assert st["rows"] == 50 and st["failed_writes"] == 0 and 1 <= st["flushes"] <= 50
    # While training, log() only appended to a dict: far less time than the writes took.
    assert blocked_while_training < st["write_s"] / 5


def test_failed_background_write_is_retried_and_a_synchronous_one_raises(db_url, make_run):
    import pytest

    sink = DbSink(db_url, 987_654, flush_s=0.0)  # no such run: the foreign key rejects every write
    sink.log(1, {"loss/policy": 1.0})
    sink._drain()
    sink.log(2, {"loss/policy": 2.0})
    sink._drain()
    assert sink.failed_writes >= 1 and sorted(sink.buffer) == [1, 2]  # rows kept for the next flush
    with pytest.raises(Exception):
        sink.flush()
    assert sorted(sink.buffer) == [1, 2]


def test_announced_checkpoints_are_recorded_while_the_owner_owns_the_run(db_url, make_run, tmp_path):
    from sqlalchemy import update

    from backend.db.metrics import list_checkpoints
    from backend.db.models import Run
    from backend.db.runs import claim_run

    rid = make_run()
    with session_scope(db_url) as s:
        claim_run(s, rid, "me:1:1")
    sink = DbSink(db_url, rid, owner="me:1:1", flush_s=1e9, background=False)
    sink.log(2, {"loss/policy": 2.0})
    sink.before_checkpoint(2)
    sink.on_checkpoint(2, tmp_path / "checkpoints" / "step_000002")
    sink.on_checkpoint(2, tmp_path / "checkpoints" / "step_000002")  # idempotent on (run, step)
    with session_scope(db_url) as s:
        s.execute(update(Run).where(Run.id == rid).values(worker="thief:9:9"))  # the run was taken over
    sink.on_checkpoint(4, tmp_path / "checkpoints" / "step_000004")  # lost: records nothing
    with session_scope(db_url) as s:
        assert [(c.step, c.path.endswith("step_000002")) for c in list_checkpoints(s, rid)] == [(2, True)]
    assert stored(db_url, rid)[0] == [2]
