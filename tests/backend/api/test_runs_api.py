"""/api/runs over HTTP (TestClient), on SQLite and PostgreSQL: create, list with filters and
pages, read, patch, cancel, delete; auth; 404/409/413/422/503."""

import pytest
from fastapi.testclient import TestClient

from backend.db import runs as repo
from backend.main import create_app
from trainer.spec.config import OptimConfig
from trainer.spec.config_renames import ConfigDeprecationWarning

TINY = {"method": "grpo", "steps": 3, "batch_prompts": 4, "eval_every": 0, "eval_problems": 8}


def _create(client, auth, **body):
    r = client.post("/api/runs", json={"config": TINY, **body}, headers=auth)
    assert r.status_code == 201, r.text
    return r.json()


def test_create_stores_validated_config_and_enqueues(client, auth, enqueued):
    run = _create(client, auth, name="first", tags=["a", "b", "a"], notes="hello")
    assert run["status"] == "queued" and run["name"] == "first" and run["method"] == "grpo"
    assert run["tags"] == ["a", "b"] and run["notes"] == "hello" and run["total_steps"] == 3
    assert "aero" not in run["config"] and run["config"]["steps"] == 3  # GRPO has no aero section
    assert run["config"]["optim"]["lr"] == OptimConfig().lr  # defaults filled in
    assert run["queue"] == "cpu" and enqueued.sent == [(run["id"], "cpu")]
    assert client.get(f"/api/runs/{run['id']}").json() == run
    assert run["created_at"].endswith("Z") and run["started_at"] is None  # UTC, explicitly


def test_a_former_field_is_stored_in_the_rollout_block_with_a_warning_header(client, auth):
    """A body with an old name (rollout_engine, 'embedded' = 'hf'; sampler_rng; aero.schedule) is
    accepted and stored under the new one; the response carries a 299 Warning per field naming the
    new field, and the OpenAPI document knows only the rollout block."""
    with pytest.warns(ConfigDeprecationWarning, match="use rollout.sampler"):
        r = client.post("/api/runs", json={"config": {**TINY, "rollout_engine": "embedded"}}, headers=auth)
    assert r.status_code == 201, r.text
    assert r.json()["config"]["rollout"]["sampler"] == "hf" and "rollout_engine" not in r.json()["config"]
    assert client.get(f"/api/runs/{r.json()['id']}").json()["config"]["rollout"]["sampler"] == "hf"  # as stored
    assert r.headers["warning"].startswith('299 - "run config field rollout_engine is deprecated: use rollout.sampler')
    with pytest.warns(ConfigDeprecationWarning, match="use rollout.schedule"):
        r = client.post("/api/runs", json={"config": {**TINY, "method": "aero", "sampler_rng": "per-row",
                                                      "aero": {"schedule": "continuous"}}}, headers=auth)
    assert r.status_code == 201, r.text
    assert r.json()["config"]["rollout"] == {"sampler": "hf", "decode": "dynamic", "rng": "per-row", "schedule": "continuous"}
    assert len(r.headers.get_list("warning")) == 2 and "aero.schedule is deprecated" in r.headers.get_list("warning")[1]
    new = client.post("/api/runs", json={"config": {**TINY, "rollout": {"sampler": "vllm"}}}, headers=auth)
    assert new.json()["config"]["rollout"]["sampler"] == "vllm" and "warning" not in new.headers
    r = client.post("/api/runs", json={"config": {**TINY, "rollout_engine": "vllm", "rollout": {"sampler": "hf"}}},
                    headers=auth)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "config", "rollout_engine"]
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert not {"rollout_engine", "sampler", "sampler_rng", "rollout_decode"} & set(schemas["RunConfig"]["properties"])
    assert schemas["RolloutConfig"]["properties"]["sampler"]["enum"] == ["hf", "vllm"]


def test_gpu_runs_go_to_the_gpu_queue(client, auth, enqueued):
    run = _create(client, auth, config={**TINY, "device": "cuda"})
    assert run["queue"] == "gpu" and enqueued.sent[-1] == (run["id"], "gpu")


def test_default_name_and_empty_body_defaults(client, auth):
    run = client.post("/api/runs", json={}, headers=auth).json()
    assert run["method"] == "aero" and run["name"] == "aero-seed0"


def test_list_filters_and_pagination(client, auth, session):
    ids = [_create(client, auth, config={**TINY, "method": m, "seed": i}, tags=t)["id"]
           for i, (m, t) in enumerate([("grpo", ["x"]), ("aero", ["x", "y"]), ("aero", []), ("dapo", ["y"]), ("aero", ["y"])])]
    repo.claim_run(session, ids[1], "w")
    session.commit()
    get = lambda q: client.get("/api/runs" + q).json()  # noqa: E731
    page = get("?limit=2&offset=0")
    assert ([r["id"] for r in page["data"]], page["count"], page["limit"]) == ([ids[4], ids[3]], 5, 2)
    assert [r["id"] for r in get("?limit=2&offset=4")["data"]] == [ids[0]]
    assert get("?limit=2&offset=10") == {"data": [], "count": 5, "limit": 2, "offset": 10}
    aero = get("?method=aero")
    assert ([r["id"] for r in aero["data"]], aero["count"]) == ([ids[4], ids[2], ids[1]], 3)
    assert [r["id"] for r in get("?tag=y&status=queued")["data"]] == [ids[4], ids[3]]
    assert [r["id"] for r in get("?status=running")["data"]] == [ids[1]]
    assert get("?status=queued&status=running")["count"] == 5
    assert get("?method=aero&method=grpo&tag=x")["count"] == 2
    for bad in ("?limit=0", "?limit=501", "?offset=-1", "?status=done", "?sweep_id=0"):
        assert client.get("/api/runs" + bad).status_code == 422, bad


def test_a_run_waiting_for_its_gpus_is_listed_as_waiting(client, auth, session):
    """A claimed run that waits for its GPUs keeps status running; its state is 'waiting', with
    what it waits for and since when, in the list and on its own; ?status=waiting lists those
    (alone or with other statuses), ?status=running lists them too. Once placed it is running."""
    ids = [_create(client, auth, config={**TINY, "seed": i})["id"] for i in range(3)]
    for rid in ids[:2]:
        repo.claim_run(session, rid, "w")
    text = "2 GPU(s): 0 of the Ray cluster's 4 free"
    assert repo.record_placement(session, ids[1], "w", waiting_for=text)
    session.commit()
    get = lambda q: client.get("/api/runs" + q).json()  # noqa: E731
    listed = {r["id"]: r for r in get("")["data"]}
    assert [listed[i]["state"] for i in ids] == ["running", "waiting", "queued"]
    assert [listed[i]["status"] for i in ids] == ["running", "running", "queued"]
    waiting = listed[ids[1]]
    assert waiting["waiting_for"] == text and waiting["waiting_since"].endswith("Z")
    assert waiting["waiting_since"] >= waiting["started_at"][:19]  # it began to wait once claimed
    assert listed[ids[0]]["waiting_since"] is None and client.get(f"/api/runs/{ids[1]}").json() == waiting
    page = get("?status=waiting")
    assert ([r["id"] for r in page["data"]], page["count"]) == ([ids[1]], 1)
    assert [r["id"] for r in get("?status=waiting&status=queued")["data"]] == [ids[2], ids[1]]
    assert [r["id"] for r in get("?status=running")["data"]] == [ids[1], ids[0]]

    assert repo.record_placement(session, ids[1], "w", waiting_for=None, placement={"cluster": "own", "gpu_ids": [["0", "1"]]})
    session.commit()
    placed = client.get(f"/api/runs/{ids[1]}").json()
    assert (placed["state"], placed["waiting_for"], placed["waiting_since"], placed["gpus"]) == ("running", None, None, 2)
    assert get("?status=waiting") == {"data": [], "count": 0, "limit": 50, "offset": 0}

    doc = client.get("/openapi.json").json()
    param = next(p for p in doc["paths"]["/api/runs"]["get"]["parameters"] if p["name"] == "status")
    assert "waiting" in param["schema"]["anyOf"][0]["items"]["enum"] and "waiting" in param["description"]
    props = doc["components"]["schemas"]["RunPublic"]["properties"]
    assert props["state"]["enum"] == ["queued", "waiting", "running", "succeeded", "failed", "cancelled"]
    assert props["status"]["enum"] == ["queued", "running", "succeeded", "failed", "cancelled"]  # the stored statuses
    assert "waiting" in props["state"]["description"] and "began to wait" in props["waiting_since"]["description"]


def test_patch_tags_and_notes(client, auth):
    run = _create(client, auth)
    r = client.patch(f"/api/runs/{run['id']}", json={"tags": ["best"], "notes": "n1"}, headers=auth)
    assert r.status_code == 200 and (r.json()["tags"], r.json()["notes"]) == (["best"], "n1")
    r = client.patch(f"/api/runs/{run['id']}", json={"notes": "n2"}, headers=auth)
    assert (r.json()["tags"], r.json()["notes"]) == (["best"], "n2")
    assert client.patch(f"/api/runs/{run['id']}", json={"status": "succeeded"}, headers=auth).status_code == 422
    assert client.patch(f"/api/runs/{run['id']}", json={"tags": ["a\x00"]}, headers=auth).status_code == 422
    assert client.patch("/api/runs/9999", json={"notes": "x"}, headers=auth).status_code == 404


def test_cancel_queued_then_delete(client, auth):
    run = _create(client, auth)
    assert client.delete(f"/api/runs/{run['id']}", headers=auth).status_code == 409  # not finished
    r = client.post(f"/api/runs/{run['id']}/cancel", headers=auth)
    assert r.status_code == 200 and r.json()["status"] == "cancelled" and r.json()["finished_at"]
    assert client.post(f"/api/runs/{run['id']}/cancel", headers=auth).status_code == 409
    assert client.delete(f"/api/runs/{run['id']}", headers=auth).status_code == 204
    assert client.get(f"/api/runs/{run['id']}").status_code == 404
    assert client.delete(f"/api/runs/{run['id']}", headers=auth).status_code == 404


def test_cancel_running_sets_flag(client, auth, session):
    run = _create(client, auth)
    repo.claim_run(session, run["id"], "w")
    session.commit()
    r = client.post(f"/api/runs/{run['id']}/cancel", headers=auth).json()
    assert (r["status"], r["cancel_requested"]) == ("running", True)
    assert client.delete(f"/api/runs/{run['id']}", headers=auth).status_code == 409


@pytest.mark.parametrize("path", ["/api/runs/424242", "/api/runs/424242/metrics", "/api/runs/424242/evals",
                                  "/api/runs/424242/export", "/api/sweeps/424242", "/api/compare?run_ids=424242",
                                  "/api/runs/424242/metrics/stream"])
def test_unknown_ids_are_404(client, path):
    assert client.get(path).status_code == 404


def test_out_of_range_ids_are_422_not_500(client, auth):
    for path in ("/api/runs/0", "/api/runs/-1", f"/api/runs/{2**63}", "/api/runs/abc"):
        assert client.get(path).status_code == 422, path
    assert client.post(f"/api/runs/{2**64}/cancel", headers=auth).status_code == 422


WRITES = [("post", "/api/runs", {"config": TINY}), ("patch", "/api/runs/1", {"notes": "x"}), ("post", "/api/runs/1/cancel", None),
          ("delete", "/api/runs/1", None), ("post", "/api/sweeps", {"methods": ["grpo"], "base": TINY})]


@pytest.mark.parametrize("method,path,body", WRITES)
def test_writes_need_a_valid_token(client, auth, method, path, body, enqueued):
    _create(client, auth)  # run 1 exists
    sent = list(enqueued.sent)
    bad_headers = [{}, {"Authorization": "Bearer aero_wrong"}, {"Authorization": "Basic dXNlcjpwYXNz"},
                   {"Authorization": auth["Authorization"] + "x"}, {"Authorization": "Bearer"}]
    for headers in bad_headers:
        r = client.request(method, path, json=body, headers=headers)
        assert r.status_code == 401, (headers, r.status_code)
        assert r.headers["www-authenticate"] == "Bearer"
    assert enqueued.sent == sent  # nothing happened
    assert client.get("/api/runs/1").json()["status"] == "queued"


def test_revoked_token_is_refused(client, auth, session):
    from backend.db.tokens import revoke_token

    assert client.post("/api/runs", json={"config": TINY}, headers=auth).status_code == 201
    assert revoke_token(session, "test") == 1
    session.commit()
    assert client.post("/api/runs", json={"config": TINY}, headers=auth).status_code == 401


def test_token_hash_only_and_last_used(client, auth, session, token):
    from backend.db.tokens import hash_token, list_tokens

    _create(client, auth)
    (row,) = list_tokens(session)
    assert row.token_hash == hash_token(token) and token not in row.token_hash and len(row.token_hash) == 64
    session.refresh(row)
    assert row.last_used_at is not None


def test_reads_open_by_default_and_protected_with_the_setting(make_settings, enqueued, auth):
    with TestClient(create_app(make_settings(auth_protect_reads=True), enqueue=enqueued)) as c:
        for path in ("/api/runs", "/api/runs/1", "/api/runs/1/metrics", "/api/compare?run_ids=1", "/metrics", "/api/sweeps/1"):
            assert c.get(path).status_code == 401, path
        assert c.get("/api/runs", headers=auth).status_code == 200
        assert c.get("/api/runs/1", headers=auth).status_code == 404  # past auth
        assert c.get("/metrics", headers=auth).status_code == 200
        assert c.get("/api/health").status_code == 200  # health never needs a token


def test_malformed_and_oversized_bodies(client, auth, make_settings, enqueued):
    hj = {**auth, "content-type": "application/json"}
    for raw in ('{"config": ', "not json", "[1, 2]", '{"config": {"steps": "many"}}', '{"config": [1]}'):
        r = client.post("/api/runs", content=raw, headers=hj)
        assert r.status_code == 422, raw
    assert client.post("/api/runs", content='{"config": {"steps": 3}, "extra": 1}', headers=hj).status_code == 422
    with TestClient(create_app(make_settings(max_body_bytes=2000), enqueue=enqueued)) as small:
        big = {"config": TINY, "notes": "x" * 5000}
        assert small.post("/api/runs", json=big, headers=auth).status_code == 413
        chunks = (b" " * 1000 for _ in range(5))  # chunked: no Content-Length
        assert small.post("/api/runs", content=chunks, headers=hj).status_code == 413
        assert small.post("/api/runs", json={"config": TINY}, headers=auth).status_code == 201


def test_broker_failure_marks_the_run_failed_and_answers_503(client, auth, enqueued):
    enqueued.fail = ConnectionError("broker down")
    r = client.post("/api/runs", json={"config": TINY}, headers=auth)
    assert r.status_code == 503 and "broker down" in r.json()["detail"]
    (run,) = client.get("/api/runs").json()["data"]
    assert run["status"] == "failed" and "could not enqueue" in run["error"]


def test_health_and_openapi(client):
    assert client.get("/api/health").json()["status"] == "ok"
    spec = client.get("/openapi.json").json()
    assert {"/api/runs", "/api/runs/{run_id}", "/api/sweeps", "/api/compare", "/api/runs/{run_id}/metrics/stream"} <= set(spec["paths"])
    assert client.get("/docs").status_code == 200
