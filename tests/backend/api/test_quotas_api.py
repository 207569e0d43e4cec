"""Per-user quotas (operator settings) at submit, on SQLite and PostgreSQL: over a quota the
API answers 429 naming the limit and the user's usage, stores nothing but the audit record,
and a sweep is refused whole; other users are not affected."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from backend.db.models import AuditEvent, Run, Sweep
from backend.db.tokens import create_token
from backend.main import create_app

TINY = {"steps": 2, "batch_prompts": 2, "n_total": 8}  # work 32


@pytest.fixture
def quota_client(make_settings, enqueued, session):
    headers = {}
    for name in ("alice", "bob"):
        _, tok = create_token(session, name, "member")
        headers[name] = {"Authorization": f"Bearer {tok}"}
    session.commit()

    def make(**quotas):
        return TestClient(create_app(make_settings(**quotas), enqueue=enqueued)), headers

    return make


def counts(session) -> tuple[int, int]:
    session.expire_all()
    return session.scalar(select(func.count(Run.id))), session.scalar(select(func.count(Sweep.id)))


def test_active_runs_quota_refuses_with_429_naming_limit_and_usage(quota_client, session, enqueued):
    client, h = quota_client(quota_active_runs=2)
    with client:
        for _ in range(2):
            assert client.post("/api/runs", json={"config": TINY}, headers=h["alice"]).status_code == 201
        stored = counts(session)
        r = client.post("/api/runs", json={"config": TINY}, headers=h["alice"])
        assert r.status_code == 429, r.text
        body = r.json()
        assert body["quota"] == {"limit": "AERO_QUOTA_ACTIVE_RUNS", "max": 2, "usage": 2, "requested": 1, "user": "alice"}
        assert "AERO_QUOTA_ACTIVE_RUNS=2" in body["detail"] and "alice has 2" in body["detail"]
        assert counts(session) == stored and len(enqueued.sent) == 2  # nothing stored, nothing sent
        assert client.post("/api/runs", json={"config": TINY}, headers=h["bob"]).status_code == 201  # per user
        first = client.get("/api/runs", params={"owner": "alice"}).json()["data"][-1]
        assert client.post(f"/api/runs/{first['id']}/cancel", headers=h["alice"]).status_code == 200
        assert client.post("/api/runs", json={"config": TINY}, headers=h["alice"]).status_code == 201  # a slot freed
        me = client.get("/api/me", headers=h["alice"]).json()
        assert me["quota"]["queued"] == 2 and me["quota"]["limits"]["AERO_QUOTA_ACTIVE_RUNS"] == 2


def test_sweep_is_all_or_nothing_against_the_quota(quota_client, session, enqueued):
    client, h = quota_client(quota_active_runs=3)
    with client:
        assert client.post("/api/runs", json={"config": TINY}, headers=h["alice"]).status_code == 201
        stored = counts(session)
        r = client.post("/api/sweeps", json={"methods": ["grpo", "dapo", "aero"], "base": TINY}, headers=h["alice"])
        assert r.status_code == 429, r.text
        assert r.json()["quota"] == {"limit": "AERO_QUOTA_ACTIVE_RUNS", "max": 3, "usage": 1, "requested": 3, "user": "alice"}
        assert counts(session) == stored and len(enqueued.sent) == 1
        r = client.post("/api/sweeps", json={"methods": ["grpo", "dapo"], "base": TINY}, headers=h["alice"])
        assert r.status_code == 201 and len(r.json()["runs"]) == 2


def test_work_budget_per_run(quota_client, session):
    client, h = quota_client(quota_run_work=32)
    with client:
        assert client.post("/api/runs", json={"config": TINY}, headers=h["alice"]).status_code == 201
        stored = counts(session)
        r = client.post("/api/runs", json={"config": {**TINY, "steps": 3}}, headers=h["alice"])
        assert r.status_code == 429
        assert r.json()["quota"] == {"limit": "AERO_QUOTA_RUN_WORK", "max": 32, "usage": 0, "requested": 48, "user": "alice"}
        assert "steps x batch_prompts x n_total" in r.json()["detail"]
        big = client.post("/api/sweeps", json={"methods": ["grpo"], "base": TINY, "overrides": [{}, {"steps": 5}]},
                          headers=h["alice"])
        assert big.status_code == 429 and big.json()["quota"]["requested"] == 80
        assert counts(session) == stored


def test_quota_refusal_is_audited(quota_client, session):
    client, h = quota_client(quota_run_work=1)
    with client:
        assert client.post("/api/runs", json={"config": TINY}, headers=h["bob"]).status_code == 429
    session.expire_all()
    events = list(session.scalars(select(AuditEvent)))
    assert [(e.action, e.user, e.role) for e in events] == [("quota.refuse", "bob", "member")]
    assert events[0].after["limit"] == "AERO_QUOTA_RUN_WORK" and events[0].after["requested"] == 32


def test_no_quota_by_default(client, auth):
    for _ in range(3):
        assert client.post("/api/runs", json={"config": TINY}, headers=auth).status_code == 201


def test_concurrent_submissions_of_one_user_cannot_both_pass_the_count(quota_client, session):
    """Eight submissions at once against a quota of 3: exactly three are stored (the user's row
    is locked first in each submit's transaction), the rest answer 429, none fails."""
    import threading

    client, h = quota_client(quota_active_runs=3)
    codes: list[int] = []
    start = threading.Barrier(8)

    def submit() -> None:
        start.wait()
        codes.append(client.post("/api/runs", json={"config": TINY}, headers=h["alice"]).status_code)

    with client:
        threads = [threading.Thread(target=submit) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert sorted(codes) == [201] * 3 + [429] * 5
    assert counts(session)[0] == 3


def verl_cpu(data_dir) -> dict:
    """A verl run on the CPU (logical GPUs) reading files under the platform's data roots."""
    return {"engine": "verl", "task": "math", "preset": None, "model_path": f"{data_dir}/m",
            "train_data": f"{data_dir}/d.jsonl", "device": "cpu", "shuffle_mini_batches": False}


def test_gpu_quota_refuses_a_run_that_could_never_start_and_stores_what_runs_hold(quota_client, session, make_settings):
    client, h = quota_client(quota_running_gpus=2)
    VERL_CPU = verl_cpu(make_settings().data_dir)
    with client:
        r = client.post("/api/runs", json={"config": {**VERL_CPU, "resources": {"gpus_per_node": 4}}}, headers=h["alice"])
        assert r.status_code == 429, r.text
        assert r.json()["quota"]["limit"] == "AERO_QUOTA_RUNNING_GPUS" and "resources.gpus_per_node" in r.json()["detail"]
        r = client.post("/api/runs", json={"config": {**VERL_CPU, "resources": {"gpus_per_node": 2}}}, headers=h["alice"])
        assert r.status_code == 201 and r.json()["gpus"] == 2 and r.json()["waiting_for"] is None
        assert client.post("/api/runs", json={"config": TINY}, headers=h["alice"]).json()["gpus"] == 0  # a CPU run
        me = client.get("/api/me", headers=h["alice"]).json()
        assert me["quota"]["limits"]["AERO_QUOTA_RUNNING_GPUS"] == 2 and me["quota"]["running_gpus"] == 0


def test_resources_are_sweepable_and_each_run_holds_its_own(quota_client, session, make_settings):
    client, h = quota_client(policy=make_settings().run_policy.model_copy(update={"max_gpus": 4}))
    VERL_CPU = verl_cpu(make_settings().data_dir)
    with client:
        body = {"methods": ["grpo"], "seeds": [0], "base": VERL_CPU,
                "overrides": [{"resources.gpus_per_node": 1}, {"resources.gpus_per_node": 2}]}
        r = client.post("/api/sweeps", json=body, headers=h["alice"])
        assert r.status_code == 201, r.text
        runs = client.get("/api/runs", params={"sweep_id": r.json()["id"]}).json()["data"]
        assert sorted(x["gpus"] for x in runs) == [1, 2]
        assert sorted(x["config"]["resources"]["gpus_per_node"] for x in runs) == [1, 2]
        bad = {**body, "overrides": [{"resources.gpus_per_node": 8}]}
        r = client.post("/api/sweeps", json=bad, headers=h["alice"])
        assert r.status_code == 422 and "AERO_MAX_GPUS" in r.text, r.text


def test_one_gpu_count_from_submit_to_claim_to_placement(quota_client, session, make_settings, monkeypatch):
    # The operator's default (AERO_VERL_GPUS=3) is resolved once, at submit, into the stored config:
    # the cap, the quota, runs.gpus, the worker's parse at claim and verl's rank count all read 3,
    # even after the operator changes the default.
    from trainer.spec.config import parse_run_config
    from trainer.spec.operator_policy import RunPolicy
    from trainer.verl.runner import run_gpus_per_node

    policy = make_settings().run_policy.model_copy(update={"verl_gpus": 3, "max_gpus": 4})
    client, h = quota_client(policy=policy, quota_running_gpus=3)
    VERL_CPU = verl_cpu(make_settings().data_dir)
    with client:
        r = client.post("/api/runs", json={"config": VERL_CPU}, headers=h["alice"])
        assert r.status_code == 201, r.text
        run = r.json()
        assert (run["gpus"], run["config"]["resources"]["gpus_per_node"]) == (3, 3)
        # the worker's parse at claim, under a policy whose default has changed since
        monkeypatch.setenv("AERO_VERL_GPUS", "5")
        claimed = parse_run_config(run["config"], RunPolicy.from_env())
        assert claimed.resources.gpus_per_node == 3 and run_gpus_per_node(claimed) == 3
        # the cap and the quota count the resolved default too
        capped = make_settings().run_policy.model_copy(update={"verl_gpus": 3, "max_gpus": 2})
        c2, _ = quota_client(policy=capped)
        with c2:
            r = c2.post("/api/runs", json={"config": VERL_CPU}, headers=h["alice"])
            assert r.status_code == 422 and "would hold 3 GPUs" in r.text and "AERO_MAX_GPUS" in r.text, r.text
        r = client.post("/api/runs", json={"config": {**VERL_CPU, "resources": {"gpus_per_node": 1}}}, headers=h["alice"])
        assert r.status_code == 201 and r.json()["gpus"] == 1  # an explicit count is kept as asked
    # without the policy (a config parsed by a direct caller), verl's count is the same default
    assert run_gpus_per_node(parse_run_config(VERL_CPU)) == 5


def test_resolve_gpus_per_engine_and_device():
    from trainer.spec.config import parse_run_config
    from trainer.spec.resources import resolve_gpus

    def gpus(**kw):
        return resolve_gpus(parse_run_config(kw), verl_gpus=2).resources.gpus_per_node

    assert gpus(device="cpu") == 0 and gpus(device="cuda") == 1
    assert gpus(device="auto") is None  # the embedded engine's worker decides the device, and with it the count
    assert gpus(engine="verl", method="grpo", device="cpu") == 2 and gpus(engine="verl", method="grpo") == 2
    assert gpus(engine="verl", method="grpo", resources={"gpus_per_node": 4}) == 4
    assert gpus(device="cpu", resources={"gpus_per_node": 0}) == 0
