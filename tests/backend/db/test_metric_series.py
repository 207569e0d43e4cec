"""The columnar copy of step metrics (backend/db/series.py) against the per-step log it is kept
from: after any mix of appends, re-logged and out-of-order steps and resume truncations, every
read gives what the log says, on SQLite and PostgreSQL; migration 0004 builds it from rows
stored before it existed."""

import random

import orjson
import pytest
from sqlalchemy import func, insert, select

from backend.db import runs as repo
from backend.db import series
from backend.db.metrics import delete_steps_after, read_step_metrics, upsert_step_metrics
from backend.db.migrate import downgrade, migrate
from backend.db.models import MetricChunk, MetricSeries, StepMetric, utcnow
from tests.stores import old_runs_table
from backend.db.session import get_engine, make_sessionmaker
from backend.services.downsample import downsample_indices
from backend.services.metric_reads import dumps, metrics_payload
from trainer.spec.config import RunConfig

C = series.CHUNK_STEPS


@pytest.fixture
def run_id(session):
    run = repo.create_run(session, RunConfig().model_dump(mode="json"), queue="cpu")
    session.commit()
    return run.id


def from_log(session, run_id, keys=None, since_step=None):
    """(steps, series) computed from step_metrics alone: the semantics the copy must keep."""
    q = select(StepMetric.step, StepMetric.metrics).where(StepMetric.run_id == run_id)
    if since_step is not None:
        q = q.where(StepMetric.step > since_step)
    rows = session.execute(q.order_by(StepMetric.step)).all()
    if keys is None:
        keys = sorted({k for _, m in rows for k in m})
        return [s for s, _ in rows], {k: [m.get(k) for _, m in rows] for k in keys}
    as_float = lambda v: None if v is None else float(v)  # noqa: E731
    return [s for s, _ in rows], {k: [as_float(m.get(k)) for _, m in rows] for k in keys}


def assert_matches_log(session, run_id, rng):
    for keys in (None, ["a", "b", "nope"], ["c"]):
        for since in (None, -1, 0, C - 1, C, rng.randrange(0, 4 * C)):
            if keys is None and since is not None and rng.random() < 0.5:
                continue
            cols = read_step_metrics(session, run_id, keys, since)
            assert (cols.steps, cols.series) == from_log(session, run_id, keys, since), (keys, since)
            if keys is not None:  # ints come back as floats, as the JSON extraction gave them
                assert all(v is None or type(v) is float for vs in cols.series.values() for v in vs)


def random_metrics(rng, step):
    m = {}
    for k in ("a", "b", "c", f"k{step % 5}"):
        r = rng.random()
        if r < 0.15:
            continue  # absent at this step
        m[k] = None if r < 0.25 else (rng.randint(-5, 5) if r < 0.45 else rng.random() * 10 ** rng.randint(-3, 12))
    return m


def test_pure_helpers_hand_computed():
    steps, cols = series.build_chunk([(1, {"a": 1.5, "b": None}), (2, {"a": 2}), (4, {"c": 3.0})])
    assert steps == [1, 2, 4] and cols == {"a": [1.5, 2], "b": [], "c": [None, None, 3.0]}
    steps, out = series.append_rows(steps, {"a": [1.5, 2]}, [(5, {"a": None, "d": 7}), (6, {"a": 9.0})])
    assert steps == [1, 2, 4, 5, 6] and out == {"a": [1.5, 2, None, None, 9.0], "d": [None, None, None, 7]}
    chunks = [(0, "[1,2]"), (1, f"[{C},{C + 1},{C + 2}]")]
    steps, start = series._starts(chunks)
    rows = [("a", 0, "[1.5]"), ("a", 1, "[null,2]"), ("b", 1, "[3,4.0,5e+20]")]
    assert steps == [1, 2, C, C + 1, C + 2]
    assert series.assemble(steps, start, rows, None) == {"a": [1.5, None, None, 2, None], "b": [None, None, 3, 4.0, 5e20]}
    assert series.assemble(steps, start, rows, ["b", "x"]) == {"b": [None, None, 3, 4.0, 5e20], "x": [None] * 5}
    spliced = series.splice([0, 1], start, rows)
    assert orjson.dumps(spliced) == orjson.dumps(series.assemble(steps, start, rows, None))
    assert series.encode([2**70, 1.0, None]) == "[1180591620717411303424, 1.0, null]"  # beyond orjson: the stdlib


def test_random_writes_and_truncations_match_the_log(session, run_id):
    rng, most = random.Random(7), 0
    for _ in range(20):
        op = rng.random()
        if op < 0.55:  # append a batch after the last step (the worker's common case)
            last = session.scalar(select(func.max(StepMetric.step)).where(StepMetric.run_id == run_id)) or 0
            batch = {s: random_metrics(rng, s) for s in range(last + 1, last + 1 + rng.choice([1, 3, 40, C + 5]))}
        elif op < 0.8:  # re-log and insert steps anywhere, out of order
            batch = {rng.randrange(0, 4 * C): random_metrics(rng, 0) for _ in range(rng.randint(1, 20))}
        else:  # a resume from an earlier checkpoint
            delete_steps_after(session, run_id, rng.randrange(0, 3 * C))
            session.commit()
            assert_matches_log(session, run_id, rng)
            continue
        upsert_step_metrics(session, run_id, batch)
        session.commit()
        assert_matches_log(session, run_id, rng)
        most = max(most, session.scalar(select(func.count()).select_from(StepMetric).where(StepMetric.run_id == run_id)))
    assert most > 2 * C  # the run spanned several chunks


def test_payload_bodies_equal_the_list_path(session, run_id):
    """Spliced all-key bodies are byte for byte what serialising the parsed lists gives."""
    rng = random.Random(3)
    upsert_step_metrics(session, run_id, {s: random_metrics(rng, s) for s in range(0, 3 * C + 17)})
    upsert_step_metrics(session, run_id, {C + 3: {"late": 1}})  # a key in one step of one chunk
    session.commit()
    for every, max_points in ((1, 5000), (1, 100), (3, 5000)):
        body = dumps(metrics_payload(session, run_id, None, None, every, max_points))
        steps, cols = from_log(session, run_id)
        idx = downsample_indices(len(steps), every, max_points)
        expect = {"run_id": run_id, "steps": [steps[i] for i in idx], "series": {k: [v[i] for i in idx] for k, v in cols.items()},
                  "stored_steps": len(steps), "last_step": steps[-1], "run_status": "queued"}
        assert body == orjson.dumps(expect)


def test_truncation_removes_later_chunks_and_delete_run_cascades(session, run_id):
    upsert_step_metrics(session, run_id, {s: {"a": float(s)} for s in range(1, 3 * C)})
    session.commit()
    assert delete_steps_after(session, run_id, C + 2) == 3 * C - 1 - (C + 2)
    session.commit()
    chunks = session.scalars(select(MetricChunk.chunk).where(MetricChunk.run_id == run_id).order_by(MetricChunk.chunk)).all()
    assert chunks == [0, 1] and read_step_metrics(session, run_id).steps == list(range(1, C + 3))
    repo.request_cancel(session, run_id)
    repo.delete_run(session, run_id)
    session.commit()
    for model in (MetricChunk, MetricSeries):
        assert session.scalar(select(func.count()).select_from(model)) == 0


def test_migration_0004_builds_the_copy_from_stored_rows(empty_db_url):
    migrate(empty_db_url, "0003")
    engine = get_engine(empty_db_url)
    rng = random.Random(11)
    stored = {1: {s: random_metrics(rng, s) for s in range(0, 2 * C + 9)}, 2: {5: {"a": 1}, 7: {"b": None}}}
    with engine.begin() as conn:
        for run_id in stored:
            conn.execute(insert(old_runs_table()).values(id=run_id, name=f"r{run_id}", method="grpo", engine="embedded", config={},
                                                      status="succeeded", queue="cpu", progress=1.0, current_step=0,
                                                      total_steps=0, tags=[], notes="", cancel_requested=False, attempts=0))
            conn.execute(insert(StepMetric.__table__), [{"run_id": run_id, "step": s, "metrics": m, "logged_at": utcnow()}
                                                        for s, m in stored[run_id].items()])
    migrate(empty_db_url)
    with make_sessionmaker(engine)() as s:
        for run_id in stored:
            for keys in (None, ["a", "b", "zz"]):
                cols = read_step_metrics(s, run_id, keys)
                assert (cols.steps, cols.series) == from_log(s, run_id, keys)
        # the copy the migration built is the one the code keeps: appending continues it
        upsert_step_metrics(s, 1, {2 * C + 20: {"a": 2.5}})
        s.commit()
        assert read_step_metrics(s, 1, ["a"]).series == from_log(s, 1, ["a"])[1]
    downgrade(empty_db_url, "0003")
    with make_sessionmaker(engine)() as s:
        assert s.scalar(select(func.count()).select_from(StepMetric)) == len(stored[1]) + len(stored[2]) + 1


def test_key_selected_bodies_equal_the_databases_json_extraction(session, run_id):
    """The answer the store gave before the copy existed (the database extracting each key from
    each step's JSON, as float) is byte for byte the answer now."""
    rng = random.Random(5)
    upsert_step_metrics(session, run_id, {s: random_metrics(rng, s) for s in range(1, 2 * C + 40)})
    session.commit()
    keys = ["a", "b", "c", "k3", "nope"]
    rows = session.execute(select(StepMetric.step, *[StepMetric.metrics[k].as_float() for k in keys])
                           .where(StepMetric.run_id == run_id).order_by(StepMetric.step)).all()
    for max_points in (5000, 50):
        idx = downsample_indices(len(rows), 1, max_points)
        expect = {"run_id": run_id, "steps": [rows[i][0] for i in idx],
                  "series": {k: [rows[i][j + 1] for i in idx] for j, k in enumerate(keys)},
                  "stored_steps": len(rows), "last_step": rows[-1][0], "run_status": "queued"}
        assert dumps(metrics_payload(session, run_id, keys, None, 1, max_points)) == orjson.dumps(expect)


def test_series_aggregates_equal_sql_over_the_json(session, run_id):
    """Compare's per-run count, mean and sum (now from the copy) agree with the database's
    avg/sum over every step's JSON, as computed before."""
    from sqlalchemy import func as f

    from backend.db.metrics import series_aggregates

    rng = random.Random(9)
    upsert_step_metrics(session, run_id, {s: random_metrics(rng, s) for s in range(1, C + 60)})
    session.commit()
    keys = ["a", "b", "c", "k1", "nope"]
    cols = [g(StepMetric.metrics[k].as_float()) for k in keys for g in (f.avg, f.sum)]
    row = session.execute(select(f.count(), *cols).where(StepMetric.run_id == run_id)).one()
    got = series_aggregates(session, run_id, keys)
    assert got["steps"] == row[0] == C + 59
    for i, k in enumerate(keys):
        assert got["mean"][k] == (None if row[1 + 2 * i] is None else pytest.approx(float(row[1 + 2 * i]), rel=1e-9)), k
        assert got["total"][k] == (None if row[2 + 2 * i] is None else pytest.approx(float(row[2 + 2 * i]), rel=1e-9)), k


def test_a_resume_from_an_older_checkpoint_drops_the_newer_checkpoint_records(session, run_id):
    """A run resumed from step 2's checkpoint (step 4's did not load) no longer lists step 4's:
    the store never names a checkpoint the run has given up; step 4's is recorded again when
    it is written again."""
    from backend.db.metrics import list_checkpoints, record_checkpoint

    upsert_step_metrics(session, run_id, {s: {"a": float(s)} for s in range(1, 5)})
    for step in (2, 4):
        record_checkpoint(session, run_id, step, f"/runs/{run_id}/checkpoints/step_{step:06d}")
    session.commit()
    assert delete_steps_after(session, run_id, 2) == 2
    session.commit()
    assert [c.step for c in list_checkpoints(session, run_id)] == [2]
    record_checkpoint(session, run_id, 4, f"/runs/{run_id}/checkpoints/step_000004")
    session.commit()
    assert [c.step for c in list_checkpoints(session, run_id)] == [2, 4]
