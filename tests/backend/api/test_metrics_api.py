"""/api/runs/{id}/metrics (keys, since_step, every, max_points), /evals and /export, and the
Prometheus endpoint, on seeded rows in SQLite and PostgreSQL."""

import csv
import io

import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families

from backend.db import runs as repo
from backend.db.metrics import upsert_eval_results, upsert_step_metrics
from trainer.spec.config import RunConfig


@pytest.fixture
def run_id(session):
    run = repo.create_run(session, RunConfig(steps=100).model_dump(mode="json"), queue="cpu")
    # steps 1..100; "b" only on even steps; one None
    upsert_step_metrics(session, run.id, {s: {"a": s * 1.5, **({"b": -s} if s % 2 == 0 else {}), "c": None if s == 3 else 1.0}
                                          for s in range(1, 101)})
    session.commit()
    return run.id


def test_all_keys_columnar(client, run_id):
    m = client.get(f"/api/runs/{run_id}/metrics").json()
    assert m["steps"] == list(range(1, 101)) and m["stored_steps"] == 100 and m["last_step"] == 100
    assert sorted(m["series"]) == ["a", "b", "c"] and m["run_status"] == "queued"
    assert m["series"]["a"][:3] == [1.5, 3.0, 4.5] and m["series"]["b"][:4] == [None, -2, None, -4]
    assert m["series"]["c"][2] is None


def test_keys_since_step_every_max_points(client, run_id):
    get = lambda q: client.get(f"/api/runs/{run_id}/metrics{q}").json()  # noqa: E731
    m = get("?keys=a&keys=b,nope&since_step=95")
    assert m["steps"] == [96, 97, 98, 99, 100] and list(m["series"]) == ["a", "b", "nope"]
    assert m["series"]["b"] == [-96, None, -98, None, -100] and m["series"]["nope"] == [None] * 5
    m = get("?keys=a&every=30")  # positions 0, 30, 60, 90 + last
    assert m["steps"] == [1, 31, 61, 91, 100] and m["series"]["a"] == [1.5, 46.5, 91.5, 136.5, 150.0]
    m = get("?keys=a&max_points=4")  # stride ceil(99/3) = 33
    assert m["steps"] == [1, 34, 67, 100] and m["stored_steps"] == 100
    m = get("?keys=a&since_step=100")
    assert (m["steps"], m["series"], m["last_step"]) == ([], {"a": []}, 100)
    for bad in ("?every=0", "?max_points=0", "?since_step=-2", f"?since_step={2**40}"):
        assert client.get(f"/api/runs/{run_id}/metrics{bad}").status_code == 422


def test_evals(client, session, run_id):
    upsert_eval_results(session, run_id, 50, {"arith": {"n": 8, "k": 4, "avg_at_k": 0.5, "pass_at_k": 0.8, "avg_ci": [0.4, 0.6],
                                                         "pass_ci": [0.7, 0.9], "per_problem": [[8, 4], [8, 1]]}})
    upsert_eval_results(session, run_id, 100, {"arith": {"n": 8, "k": 4, "avg_at_k": 0.6, "pass_at_k": 0.9}, "overall": {"k": 4, "avg_at_k": 0.6}})
    session.commit()
    ev = client.get(f"/api/runs/{run_id}/evals").json()
    assert ev["count"] == 3
    first = ev["data"][0]
    assert (first["step"], first["benchmark"], first["avg_ci"], first["per_problem"]) == (50, "arith", [0.4, 0.6], [[8, 4], [8, 1]])
    assert [e["step"] for e in client.get(f"/api/runs/{run_id}/evals?benchmark=arith").json()["data"]] == [50, 100]
    assert client.get(f"/api/runs/{run_id}/evals?step=100&per_problem=false").json()["data"][0]["per_problem"] is None


def test_export_csv_and_parquet_are_readable(client, run_id):
    r = client.get(f"/api/runs/{run_id}/export?format=csv")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert f"run-{run_id}.csv" in r.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert len(rows) == 100 and list(rows[0]) == ["step", "a", "b", "c"]
    assert (rows[1]["step"], float(rows[1]["a"]), float(rows[1]["b"]), rows[0]["b"], rows[2]["c"]) == ("2", 3.0, -2.0, "", "")
    r = client.get(f"/api/runs/{run_id}/export?format=parquet")
    t = pq.read_table(io.BytesIO(r.content))
    assert t.column_names == ["step", "a", "b", "c"] and t.num_rows == 100
    assert t.column("step").to_pylist()[:2] == [1, 2] and t.column("b").to_pylist()[:2] == [None, -2.0]
    assert client.get(f"/api/runs/{run_id}/export?format=xlsx").status_code == 422


def test_prometheus_text_parses(client, session, run_id):
    repo.create_run(session, RunConfig().model_dump(mode="json"), queue="cpu")
    done = repo.create_run(session, RunConfig().model_dump(mode="json"), queue="cpu")
    repo.claim_run(session, done.id, "w")
    repo.mark_succeeded(session, done.id)
    session.commit()
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    fams = {f.name: f for f in text_string_to_metric_families(r.text)}
    value = lambda name, **labels: next(s.value for s in fams[name].samples if s.labels == labels)  # noqa: E731
    assert value("aero_queue_depth") == 2
    assert value("aero_runs", status="queued") == 2 and value("aero_runs", status="succeeded") == 1
    assert value("aero_runs", status="failed") == 0
    assert value("aero_steps_per_second") == pytest.approx(100 / 60, rel=1e-5)  # 100 steps stored just now
    assert value("aero_steps_stored") == 100
    assert value("aero_runs_waiting") == 0 and fams["aero_gpus_held"].samples == []  # nothing running
    assert client.get("/api/metrics").text == r.text


def test_prometheus_counts_waiting_runs_and_the_gpus_each_user_holds(client, session, run_id):
    """aero_runs_waiting: running runs waiting for their GPUs (not queued runs, which
    aero_queue_depth counts); aero_gpus_held{owner}: the stored gpus of each user's running runs
    that wait for nothing (placed, or placed by nothing), not of waiting, queued or finished ones."""
    def run(owner, gpus, claim=True):
        r = repo.create_run(session, RunConfig().model_dump(mode="json"), queue="gpu", owner=owner, gpus=gpus)
        if claim:
            repo.claim_run(session, r.id, "w")
        return r.id

    placed, waiting = run("alice", 2), run("alice", 1)
    repo.record_placement(session, placed, "w", waiting_for=None, placement={"cluster": "own", "gpu_ids": [["0", "1"]]})
    repo.record_placement(session, waiting, "w", waiting_for="1 GPU(s): 0 of the Ray cluster's 2 free")
    run("bob", 4), run(None, 0)  # an embedded GPU run without Ray (placed by nothing); a run from before users
    bob_waits = run("bob", 8)
    repo.record_placement(session, bob_waits, "w", waiting_for="8 GPU(s): 2 of the Ray cluster's 8 free")
    done = run("carol", 3)
    repo.mark_succeeded(session, done)
    run("carol", 2, claim=False)  # queued
    session.commit()
    fams = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    assert fams["aero_runs_waiting"].samples[0].value == 2 and fams["aero_queue_depth"].samples[0].value == 2
    held = {s.labels["owner"]: s.value for s in fams["aero_gpus_held"].samples}
    assert held == {"": 0, "alice": 2, "bob": 4}
    assert fams["aero_gpus_held"].type == "gauge" and "owner" in fams["aero_gpus_held"].samples[0].labels


def test_cached_answers_follow_new_steps_and_status(client, app, session, run_id):
    url = f"/api/runs/{run_id}/metrics?keys=a&since_step=98"
    first = client.get(url).json()
    assert first["steps"] == [99, 100] and client.get(url).json() == first
    cache = app.state.metrics_cache
    assert cache.hits >= 1 and len(cache) == 1
    upsert_step_metrics(session, run_id, {101: {"a": 7.0}, 100: {"a": -1.0}})  # new step and a re-logged one
    session.commit()
    m = client.get(url).json()
    assert (m["steps"], m["series"]["a"], m["last_step"]) == ([99, 100, 101], [148.5, -1.0, 7.0], 101)
    from backend.db.metrics import delete_steps_after

    assert delete_steps_after(session, run_id, 99) == 2  # a resume from step 99's checkpoint
    session.commit()
    assert client.get(url).json()["steps"] == [99]
    repo.request_cancel(session, run_id)
    session.commit()
    assert client.get(url).json()["run_status"] == "cancelled"


def test_etag_answers_304_until_a_step_lands(client, session, run_id):
    url = f"/api/runs/{run_id}/metrics?keys=a"
    r = client.get(url)
    etag = r.headers["etag"]
    assert etag.startswith('W/"') and client.get(f"/api/runs/{run_id}/metrics?keys=b").headers["etag"] != etag
    r2 = client.get(url, headers={"If-None-Match": etag})
    assert (r2.status_code, r2.content, r2.headers["etag"]) == (304, b"", etag)
    upsert_step_metrics(session, run_id, {101: {"a": 1.0}})
    session.commit()
    r3 = client.get(url, headers={"If-None-Match": etag})
    assert r3.status_code == 200 and r3.json()["steps"][-1] == 101 and r3.headers["etag"] != etag


def test_cache_off_gives_the_same_bodies(make_settings, enqueued, run_id):
    from fastapi.testclient import TestClient

    from backend.main import create_app

    with TestClient(create_app(make_settings(metrics_cache_mb=0), enqueue=enqueued)) as c, \
         TestClient(create_app(make_settings(), enqueue=enqueued)) as cached:
        for q in ("", "?keys=a,b&every=7", "?max_points=10&since_step=5"):
            assert c.get(f"/api/runs/{run_id}/metrics{q}").content == cached.get(f"/api/runs/{run_id}/metrics{q}").content
        assert c.app.state.metrics_cache is None


def test_byte_lru_bounds_bytes():
    from backend.services.cache import ByteLRU

    lru = ByteLRU(100)
    lru.put("a", b"x" * 20)
    lru.put("b", b"x" * 20)
    assert lru.get("a") == b"x" * 20  # a is now most recent
    for k in "cde":
        lru.put(k, b"x" * 20)
    lru.put("f", b"x" * 20)  # 120 bytes > 100: evicts the least recent (b)
    assert lru.get("b") is None and lru.get("a") is not None and lru.size == 100
    lru.put("huge", b"x" * 26)  # over a quarter of the budget: not cached
    assert lru.get("huge") is None


def test_concurrent_misses_build_once():
    import threading
    import time

    from backend.services.cache import ByteLRU

    lru, builds = ByteLRU(1000), []

    def build():
        builds.append(1)
        time.sleep(0.05)
        return b"body"

    out = []
    threads = [threading.Thread(target=lambda: out.append(lru.get_or_build("k", build))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [b"body"] * 8 and len(builds) == 1


def test_a_metrics_read_opens_no_transaction_on_postgresql_and_the_pool_gets_its_connection_back_transactional(db, run_id):
    """The hot read runs its two statements outside a transaction on PostgreSQL (no BEGIN and
    ROLLBACK round trips); the next session from the pool is transactional again."""
    from psycopg.pq import TransactionStatus
    from sqlalchemy import text

    from backend.db.session import get_engine, make_sessionmaker
    from backend.services.metric_reads import metrics_body

    maker = make_sessionmaker(get_engine(db))
    with maker() as s:
        etag, body = metrics_body(s, run_id, ["a"], None, 1, 10)
        assert body.startswith(b'{"run_id":') and etag.startswith(f'W/"{run_id}-')
        dbapi = s.connection().connection.dbapi_connection
        if db.startswith("postgresql"):
            assert dbapi.autocommit and dbapi.info.transaction_status == TransactionStatus.IDLE
    with maker() as s:  # a write session from the same pool
        s.execute(text("SELECT 1"))
        dbapi = s.connection().connection.dbapi_connection
        if db.startswith("postgresql"):
            assert not dbapi.autocommit and dbapi.info.transaction_status == TransactionStatus.INTRANS
        s.rollback()
