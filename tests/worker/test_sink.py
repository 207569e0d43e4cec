"""DbSink: buffered, batched, idempotent on (run, step); flush policy; resume truncation."""

from __future__ import annotations

import math

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


def test_buffers_until_checkpoint_step_or_interval(db_url, make_run):
    rid, clock = make_run(), Clock()
    sink = DbSink(db_url, rid, checkpoint_every=4, flush_s=10.0, clock=clock)
    sink.log(1, {"loss/policy": 1.0})
    sink.log(2, {"loss/policy": 2.0})
    assert stored(db_url, rid) == ([], []) and sink.flushes == 0
    clock.t = 10.0  # interval elapsed: steps 1..3 go out in one statement
    sink.log(3, {"loss/policy": 3.0})
    assert stored(db_url, rid) == ([1, 2, 3], [1.0, 2.0, 3.0]) and sink.flushes == 1
    sink.log(4, {"loss/policy": 4.0})  # a checkpoint step: durable before the trainer checkpoints
    assert stored(db_url, rid)[0] == [1, 2, 3, 4] and sink.flushes == 2
    sink.log(5, {"loss/policy": 5.0})
    sink.close()
    assert stored(db_url, rid)[0] == [1, 2, 3, 4, 5]
    assert sink.stats()["rows"] == 5 and sink.stats()["write_s"] > 0


def test_relogged_steps_are_stored_once_with_latest_values(db_url, make_run):
    rid = make_run()
    sink = DbSink(db_url, rid, flush_s=0.0)
    for step in (1, 2, 3):
        sink.log(step, {"loss/policy": float(step), "x": 1})
    # A resumed run (checkpoint at 1) re-logs 2 and 3 with new values and goes on.
    resumed = DbSink(db_url, rid, flush_s=0.0)
    for step in (2, 3, 4):
        resumed.log(step, {"loss/policy": 10.0 * step})
    with session_scope(db_url) as s:
        assert step_count(s, rid) == (4, 4)
    assert stored(db_url, rid) == ([1, 2, 3, 4], [1.0, 20.0, 30.0, 40.0])


def test_truncate_after_drops_the_lost_future_and_non_finite_values_become_null(db_url, make_run):
    rid = make_run()
    sink = DbSink(db_url, rid, flush_s=0.0)
    for step in (1, 2, 3):
        sink.log(step, {"loss/policy": math.nan if step == 2 else 1.0})
    sink.log_eval(2, EVAL)
    sink.log_eval(3, EVAL)
    resumed = DbSink(db_url, rid, flush_s=0.0)
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
