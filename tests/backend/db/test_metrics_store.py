"""Idempotent batched upserts of step metrics, evals and checkpoints (SQLite and PostgreSQL)."""

import pytest
from sqlalchemy import func, select

from backend.db import runs as repo
from backend.db.metrics import (
    BATCH_ROWS,
    clean_value,
    latest_checkpoint,
    latest_evals,
    list_evals,
    read_step_metrics,
    record_checkpoint,
    step_count,
    upsert_eval_results,
    upsert_step_metrics,
)
from backend.db.models import StepMetric
from trainer.spec.config import RunConfig


@pytest.fixture
def run_id(session):
    run = repo.create_run(session, RunConfig().model_dump(mode="json"), queue="cpu")
    session.commit()
    return run.id


def test_clean_value():
    assert clean_value(3) == 3 and isinstance(clean_value(3), int)
    assert clean_value(True) == 1
    assert clean_value(0.5) == 0.5
    assert clean_value(float("nan")) is None and clean_value(float("inf")) is None and clean_value(None) is None
    np = pytest.importorskip("numpy")
    assert clean_value(np.float32(0.25)) == 0.25 and type(clean_value(np.float32(0.25))) is float
    with pytest.raises((TypeError, ValueError)):
        clean_value("abc")


def test_upsert_is_idempotent_on_run_and_step(session, run_id):
    assert upsert_step_metrics(session, run_id, {1: {"a": 1.0}, 2: {"a": 2.0}}) == 2
    session.commit()
    # a resumed run re-logs step 2 with new values and logs step 3; twice, as a redelivery would
    for _ in range(2):
        upsert_step_metrics(session, run_id, [(2, {"a": 20.0, "b": float("nan")}), (3, {"a": 3.0})])
        session.commit()
    assert step_count(session, run_id) == (3, 3)
    cols = read_step_metrics(session, run_id)
    assert cols.steps == [1, 2, 3]
    assert cols.series == {"a": [1.0, 20.0, 3.0], "b": [None, None, None]}


def test_duplicate_steps_in_one_batch_keep_the_last(session, run_id):
    assert upsert_step_metrics(session, run_id, [(5, {"a": 1}), (5, {"a": 2})]) == 1
    session.commit()
    assert read_step_metrics(session, run_id).series["a"] == [2]


def test_large_batches_are_split(session, run_id):
    n = 2 * BATCH_ROWS + 7
    upsert_step_metrics(session, run_id, {s: {"x": s * 0.5, "y": -s} for s in range(1, n + 1)})
    session.commit()
    assert session.scalar(select(func.count()).select_from(StepMetric)) == n
    cols = read_step_metrics(session, run_id, keys=["y", "missing"], since_step=n - 3)
    assert cols.steps == [n - 2, n - 1, n]
    assert cols.series == {"y": [-(n - 2), -(n - 1), -n], "missing": [None, None, None]}


def test_eval_results_upsert_and_latest(session, run_id):
    res = {"arith": {"n": 8, "k": 4, "avg_at_k": 0.5, "pass_at_k": 0.75, "avg_ci": [0.4, 0.6], "pass_ci": [0.6, 0.9],
                     "per_problem": [[8, 4], [8, 0]]},
           "overall": {"n": 8, "k": 4, "avg_at_k": 0.5, "pass_at_k": float("nan")}}
    assert upsert_eval_results(session, run_id, 10, res) == 2
    assert upsert_eval_results(session, run_id, 10, {"arith": {**res["arith"], "avg_at_k": 0.55}}) == 1
    upsert_eval_results(session, run_id, 20, {"arith": {**res["arith"], "avg_at_k": 0.7}})
    session.commit()
    rows = list_evals(session, run_id)
    assert [(r.step, r.benchmark) for r in rows] == [(10, "arith"), (10, "overall"), (20, "arith")]
    first = rows[0]
    assert (first.avg_at_k, first.avg_ci_lo, first.pass_ci_hi, first.per_problem) == (0.55, 0.4, 0.9, [[8, 4], [8, 0]])
    assert rows[1].pass_at_k is None and rows[1].avg_ci_lo is None
    latest = latest_evals(session, run_id)
    assert (latest["arith"].step, latest["arith"].avg_at_k, latest["overall"].step) == (20, 0.7, 10)


def test_checkpoints(session, run_id):
    assert latest_checkpoint(session, run_id) is None
    record_checkpoint(session, run_id, 20, "/x/ckpt-20")
    record_checkpoint(session, run_id, 40, "/x/ckpt-40")
    record_checkpoint(session, run_id, 40, "/y/ckpt-40")
    session.commit()
    assert (latest_checkpoint(session, run_id).step, latest_checkpoint(session, run_id).path) == (40, "/y/ckpt-40")


def test_delete_run_removes_its_rows(session, run_id):
    upsert_step_metrics(session, run_id, {1: {"a": 1}})
    upsert_eval_results(session, run_id, 1, {"b": {"k": 1, "avg_at_k": 1.0}})
    record_checkpoint(session, run_id, 1, "p")
    repo.request_cancel(session, run_id)
    repo.delete_run(session, run_id)
    session.commit()
    assert step_count(session, run_id) == (0, None) and list_evals(session, run_id) == []
