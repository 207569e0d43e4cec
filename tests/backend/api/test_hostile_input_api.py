"""Hostile but authorised input answers 4xx, never 5xx, and never breaks shared state:
deep or huge sweep overrides, NaN / Infinity / lone surrogates echoed in a 422, NUL characters,
too many metric keys, numbers sent as strings or booleans, a store that is down; sweeps are
created all or nothing and can be deleted."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from backend.db import runs as runs_repo
from backend.db.metrics import upsert_step_metrics
from backend.db.models import Run, StepMetric, Sweep
from backend.main import create_app
from backend.services.configs import MAX_JSON_DEPTH, MAX_JSON_ITEMS, json_shape_issue
from backend.services.metric_reads import MAX_METRIC_KEYS
from backend.settings import Settings

BASE = {"steps": 3, "batch_prompts": 4, "eval_every": 0}
JSON = {"content-type": "application/json"}


def nested(depth: int) -> dict:
    out: dict = {}
    cur = out
    for _ in range(depth - 1):
        cur["a"] = {}
        cur = cur["a"]
    return out


def post_raw(client, path: str, raw: str, auth):
    """POST a body as written (Python's json would refuse NaN or lone surrogates on the way out)."""
    return client.post(path, content=raw.encode(), headers={**auth, **JSON})


def counts(client) -> tuple[int, int]:
    return client.get("/api/sweeps").json()["count"], client.get("/api/runs").json()["count"]


# ----------------------------------------------------------------------------- overrides: depth, size


def test_shape_limits():
    assert json_shape_issue(nested(MAX_JSON_DEPTH)) is None
    assert json_shape_issue(nested(MAX_JSON_DEPTH + 1)) == f"nested deeper than {MAX_JSON_DEPTH} levels"
    assert json_shape_issue({"a": list(range(MAX_JSON_ITEMS))}) == f"more than {MAX_JSON_ITEMS} keys and list items"
    assert json_shape_issue(nested(100_000)) is not None  # iterative: no RecursionError


@pytest.mark.parametrize("override", [nested(900), nested(MAX_JSON_DEPTH + 1), {f"k{i}": {} for i in range(300)},
                                      {"aero": {"x": [[[[[[[[[1]]]]]]]]]}}])
def test_deep_or_huge_override_is_422_and_stores_nothing(client, auth, enqueued, override):
    r = client.post("/api/sweeps", json={"base": BASE, "methods": ["grpo"], "overrides": [{}, override]}, headers=auth)
    assert r.status_code == 422, r.text
    item = r.json()["detail"][0]
    assert item["loc"] == ["body", "overrides", 1]
    assert item["msg"].startswith("overrides.1: ") and ("nested deeper than 8 levels" in item["msg"] or "keys and list items" in item["msg"])
    assert counts(client) == (0, 0) and enqueued.sent == []
    assert client.get("/api/sweeps").status_code == 200


def test_override_at_the_depth_limit_is_accepted_and_readable(client, auth):
    r = client.post("/api/sweeps", json={"base": BASE, "methods": ["grpo"], "overrides": [nested(MAX_JSON_DEPTH)]}, headers=auth)
    assert r.status_code == 201, r.text
    assert client.get("/api/sweeps").status_code == 200
    assert client.get(f"/api/sweeps/{r.json()['id']}").status_code == 200


@pytest.mark.parametrize("raw", ['{"a\\u0000": {}}', '{"notes": {"x": "a\\u0000b"}}', '{"aero": {"k\\ud800": {}}}',
                                 '{"aero": {"k": NaN}}', '{"aero": {"x": {}}, "y": {"z": Infinity}}'])
def test_override_the_store_cannot_keep_is_422(client, auth, raw):
    body = f'{{"base": {json.dumps(BASE)}, "methods": ["grpo"], "overrides": [{raw}]}}'
    r = post_raw(client, "/api/sweeps", body, auth)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][:3] == ["body", "overrides", 0]
    assert counts(client) == (0, 0)


def test_a_sweep_stored_before_the_limit_does_not_break_listings(client, auth, session):
    sweep = Sweep(name="legacy", spec={"base": {}, "overrides": [nested(900)]})
    session.add(sweep)
    session.commit()
    assert client.get("/api/sweeps").status_code == 200
    got = client.get(f"/api/sweeps/{sweep.id}")
    assert got.status_code == 200 and "delete this sweep" in got.json()["spec"]["error"]
    assert client.delete(f"/api/sweeps/{sweep.id}", headers=auth).status_code == 204


# ----------------------------------------------------------------------------- sweeps: all or nothing, delete


class FailAfter:
    def __init__(self, ok: int):
        self.ok, self.sent = ok, []

    def __call__(self, run_id: int, queue: str) -> None:
        if len(self.sent) >= self.ok:
            raise ConnectionError("broker down")
        self.sent.append(run_id)


@pytest.mark.parametrize("ok", [0, 2])
def test_sweep_enqueue_failure_stores_nothing(make_settings, auth, ok):
    enqueue = FailAfter(ok)
    with TestClient(create_app(make_settings(), enqueue=enqueue)) as c:
        r = c.post("/api/sweeps", json={"base": BASE, "methods": ["grpo", "aero"], "seeds": [0, 1]}, headers=auth)
        assert r.status_code == 503, r.text
        assert "nothing was stored" in r.json()["detail"] and "broker down" in r.json()["detail"]
        assert counts(c) == (0, 0)
        assert len(enqueue.sent) == ok  # tasks already sent name runs that no longer exist: workers skip them


def test_sweep_with_a_bad_run_config_stores_nothing(client, auth, enqueued):
    r = client.post("/api/sweeps", json={"base": BASE, "methods": ["grpo", "aero"], "overrides": [{}, {"steps": "10"}]}, headers=auth)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "overrides", 1, "steps"]
    assert counts(client) == (0, 0) and enqueued.sent == []


def test_delete_sweep(client, auth, session):
    sw = client.post("/api/sweeps", json={"base": BASE, "methods": ["grpo", "aero"]}, headers=auth).json()
    other = client.post("/api/runs", json={"config": BASE}, headers=auth).json()
    ids = [x["id"] for x in sw["runs"]]
    assert client.delete(f"/api/sweeps/{sw['id']}").status_code == 401
    assert client.delete("/api/sweeps/999", headers=auth).status_code == 404
    r = client.delete(f"/api/sweeps/{sw['id']}", headers=auth)
    assert r.status_code == 409 and "2 queued" in r.json()["detail"]
    assert client.post(f"/api/runs/{ids[0]}/cancel", headers=auth).json()["status"] == "cancelled"
    r = client.delete(f"/api/sweeps/{sw['id']}", headers=auth)
    assert r.status_code == 409 and "1 queued" in r.json()["detail"]  # nothing deleted
    assert client.get(f"/api/sweeps/{sw['id']}").json()["run_count"] == 2
    runs_repo.mark_failed(session, ids[1], "boom")
    upsert_step_metrics(session, ids[1], [(1, {"reward/mean": 0.5})])
    session.commit()
    assert client.delete(f"/api/sweeps/{sw['id']}", headers=auth).status_code == 204
    assert client.get(f"/api/sweeps/{sw['id']}").status_code == 404
    assert all(client.get(f"/api/runs/{i}").status_code == 404 for i in ids)
    assert client.get(f"/api/runs/{other['id']}").status_code == 200  # runs outside the sweep stay
    session.expire_all()
    assert session.query(StepMetric).filter(StepMetric.run_id.in_(ids)).count() == 0
    assert session.query(Sweep).count() == 0 and session.query(Run).count() == 1


# ----------------------------------------------------------------------------- 422 echo is JSON-safe


@pytest.mark.parametrize("raw,loc", [
    ('{"config": {"steps": NaN}}', ["body", "config", "steps"]),
    ('{"config": {"optim": {"lr": -Infinity}}}', ["body", "config", "optim", "lr"]),
    ('{"config": {"aero": {"tau": Infinity}}}', ["body", "config", "aero", "tau"]),
    ('{"config": {}, "name": "\\udc00x"}', ["body", "name"]),
    ('{"config": {}, "tags": ["\\ud800"]}', ["body", "tags", 0]),
    ('{"config": {}, "notes": "a\\udfffb"}', ["body", "notes"]),
    ('{"config": {"name": "\\ud800"}}', ["body", "config", "name"]),
    ('{"config": {"no_such\\ud800": NaN}}', None),
    ('{"config": {"steps": 1}, "junk": {"a": [NaN, Infinity, "\\udc00"]}}', ["body", "junk"]),
])
def test_422_echo_is_json_safe(client, auth, raw, loc):
    r = post_raw(client, "/api/runs", raw, auth)
    assert r.status_code == 422, r.text
    detail = json.loads(r.content.decode("utf-8"))["detail"]  # strict UTF-8, RFC 8259 JSON
    if loc is not None:
        assert detail[0]["loc"] == loc
    assert client.get("/api/runs").json()["count"] == 0


def test_422_echo_of_a_deep_unknown_field(client, auth):
    r = client.post("/api/runs", json={"config": {"zzz": nested(500)}}, headers=auth)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "config", "zzz"]


# ----------------------------------------------------------------------------- NUL characters


@pytest.mark.parametrize("body,loc", [
    ({"config": {"name": "a\x00b"}}, ["body", "config", "name"]),
    ({"config": {}, "notes": "a\x00b"}, ["body", "notes"]),
    ({"config": {}, "tags": ["a\x00"]}, ["body", "tags", 0]),
    ({"config": {"benchmarks": {"x\x00": "y"}}}, ["body", "config", "benchmarks"]),
])
def test_nul_in_body_is_422_naming_the_field(client, auth, body, loc):
    r = client.post("/api/runs", json=body, headers=auth)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][:len(loc)] == loc
    assert client.get("/api/runs").json()["count"] == 0


@pytest.mark.parametrize("path,name", [("/api/runs?tag=a%00", "tag"), ("/api/runs?method=%00", "method"),
                                       ("/api/runs/1/evals?benchmark=x%00", "benchmark"),
                                       ("/api/runs/1/metrics?keys=a%00b", "keys"), ("/api/sweeps?x%00=1", "x\\u0000")])
def test_nul_in_query_is_422_naming_the_parameter(client, path, name):
    r = client.get(path)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["query", name]


# ----------------------------------------------------------------------------- metric keys


def test_too_many_metric_keys_is_422(client, auth):
    run = client.post("/api/runs", json={"config": BASE}, headers=auth).json()
    ok = ",".join(f"k{i}" for i in range(MAX_METRIC_KEYS))
    assert client.get(f"/api/runs/{run['id']}/metrics", params={"keys": ok}).status_code == 200
    for n in (MAX_METRIC_KEYS + 1, 2_000, 5_000):
        r = client.get(f"/api/runs/{run['id']}/metrics", params={"keys": ",".join(f"k{i}" for i in range(n))})
        assert r.status_code == 422, (n, r.text[:200])
        assert r.json()["detail"][0]["loc"] == ["query", "keys"] and str(MAX_METRIC_KEYS) in r.json()["detail"][0]["msg"]
    r = client.get(f"/api/runs/{run['id']}/metrics/stream", params={"keys": ",".join(f"k{i}" for i in range(MAX_METRIC_KEYS + 1))})
    assert r.status_code == 422


# ----------------------------------------------------------------------------- strict numbers


@pytest.mark.parametrize("config,loc", [
    ({"steps": "10"}, ["steps"]), ({"steps": True}, ["steps"]), ({"n_total": False}, ["n_total"]),
    ({"optim": {"lr": "1e-4"}}, ["optim", "lr"]), ({"temperature": True}, ["temperature"]),
    ({"optim": {"warmup_steps": "3"}}, ["optim", "warmup_steps"]), ({"aero": {"n_explore": "4"}}, ["aero", "n_explore"]),
])
def test_strings_and_booleans_are_not_numbers(client, auth, config, loc):
    r = client.post("/api/runs", json={"config": {**BASE, **config}}, headers=auth)
    assert r.status_code == 422, r.text
    item = r.json()["detail"][0]
    assert item["loc"] == ["body", "config", *loc] and "JSON" in item["msg"]
    r = client.post("/api/sweeps", json={"base": BASE, "methods": ["grpo", "aero"], "overrides": [config]}, headers=auth)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "overrides", 0, *loc]


def test_real_numbers_still_pass(client, auth):
    cfg = {**BASE, "steps": 10.0, "temperature": 1, "optim": {"lr": 1e-4, "warmup_steps": None}, "aero": {"k": 2}}
    r = client.post("/api/runs", json={"config": cfg}, headers=auth)
    assert r.status_code == 201, r.text
    assert r.json()["config"]["steps"] == 10 and r.json()["config"]["aero"]["k"] == 2.0


# ----------------------------------------------------------------------------- store down -> 503


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_store_unreachable_is_503_on_every_route(tmp_path, kind):
    (tmp_path / "db.sqlite").mkdir()  # a directory where the file should be: "unable to open database file"
    url = "postgresql://nobody@127.0.0.1:1/nothing" if kind == "postgresql" else f"sqlite:///{tmp_path}/db.sqlite"
    app = create_app(Settings(database_url=url, data_dir=tmp_path / "data", migrate_on_start=False), enqueue=lambda *a: None)
    with TestClient(app, raise_server_exceptions=False) as c:
        assert c.get("/api/health").status_code == 503
        for path in ("/api/runs", "/api/runs/1", "/api/sweeps", "/api/sweeps/1", "/api/runs/1/metrics", "/api/compare?run_ids=1",
                     "/metrics"):
            r = c.get(path)
            assert r.status_code == 503, (path, r.status_code, r.text[:200])
            assert r.json()["detail"].startswith("store unreachable")
        r = c.post("/api/runs", json={"config": BASE}, headers={"Authorization": "Bearer aero_x"})
        assert r.status_code == 503


@pytest.mark.parametrize("depth", [900, 5_000])
def test_deep_bodies_anywhere_are_4xx(client, auth, depth):
    """Up to the JSON parser's own limit (~950 levels) a deep value is a 422 naming its field;
    beyond it FastAPI answers 400 ("There was an error parsing the body"). Never 5xx."""
    deep = "[" * depth + "]" * depth
    for path, raw in [("/api/runs", f'{{"config": {{}}, "tags": {deep}}}'), ("/api/runs", f'{{"config": {{"x": {deep}}}}}'),
                      ("/api/sweeps", f'{{"methods": ["grpo"], "overrides": [{{"a": {deep}}}]}}')]:
        r = post_raw(client, path, raw, auth)
        assert r.status_code == (422 if depth < 950 else 400), (path, r.text[:200])
    assert counts(client) == (0, 0)


@pytest.mark.parametrize("value", [[], ["arithmetic"], {"name": "arithmetic"}, [[[[["x"]]]]]])
@pytest.mark.parametrize("field", ["task", "preset", "method"])
def test_a_name_field_given_a_list_or_dict_is_422_naming_it(client, auth, field, value):
    # model validators read these names before pydantic checks their types: a list once crashed one (500)
    r = client.post("/api/runs", json={"config": {**BASE, field: value}}, headers=auth)
    assert r.status_code == 422, r.text
    assert any(d["loc"][:3] == ["body", "config", field] for d in r.json()["detail"]), r.json()
    if field != "method":  # a sweep's own methods list sets each run's method over an override's
        r = client.post("/api/sweeps", json={"base": BASE, "methods": ["grpo"], "overrides": [{field: value}]},
                        headers=auth)
        assert r.status_code == 422, r.text
