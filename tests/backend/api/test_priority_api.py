"""A run's priority at submit, on SQLite and PostgreSQL: 0..10, default 0, shown in the run's
answer; capped by the submitter's role (AERO_PRIORITY_MAX_ADMIN / _MEMBER): above the cap a run
or a sweep answers 422 naming ``priority`` and nothing is stored; a sweep gives it to every run."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from backend.db.models import Run, Sweep
from backend.db.tokens import create_token
from backend.main import create_app

TINY = {"steps": 2, "batch_prompts": 2, "n_total": 8}


@pytest.fixture
def roles_client(make_settings, enqueued, session):
    headers = {}
    for name, role in (("alice", "member"), ("root", "admin")):
        _, tok = create_token(session, name, role)
        headers[name] = {"Authorization": f"Bearer {tok}"}
    session.commit()

    def make(**settings):
        return TestClient(create_app(make_settings(**settings), enqueue=enqueued)), headers

    return make


def stored(session) -> tuple[int, int]:
    session.expire_all()
    return session.scalar(select(func.count(Run.id))), session.scalar(select(func.count(Sweep.id)))


def test_priority_defaults_to_0_and_is_capped_by_role(roles_client, session, enqueued):
    client, h = roles_client()
    with client:
        r = client.post("/api/runs", json={"config": TINY}, headers=h["alice"])
        assert r.status_code == 201 and r.json()["priority"] == 0
        r = client.post("/api/runs", json={"config": TINY, "priority": 5}, headers=h["alice"])
        assert r.status_code == 201 and r.json()["priority"] == 5  # a member's default cap
        assert client.get(f"/api/runs/{r.json()['id']}").json()["priority"] == 5
        before = stored(session)
        r = client.post("/api/runs", json={"config": TINY, "priority": 6}, headers=h["alice"])
        assert r.status_code == 422, r.text
        (item,) = r.json()["detail"]
        assert item["loc"] == ["body", "priority"] and "AERO_PRIORITY_MAX_MEMBER" in item["msg"] and "(5" in item["msg"]
        assert stored(session) == before and len(enqueued.sent) == 2  # nothing stored, nothing sent
        r = client.post("/api/runs", json={"config": TINY, "priority": 10}, headers=h["root"])
        assert r.status_code == 201 and r.json()["priority"] == 10  # an admin's
        r = client.post("/api/runs", json={"config": TINY, "priority": 11}, headers=h["root"])
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "priority"]  # the field's own bound
        assert client.get("/api/me", headers=h["alice"]).json()["max_priority"] == 5
        assert client.get("/api/me", headers=h["root"]).json()["max_priority"] == 10


def test_the_operator_sets_the_caps_and_a_sweep_is_refused_whole(roles_client, session):
    client, h = roles_client(priority_max_member=2, priority_max_admin=4)
    with client:
        body = {"base": TINY, "methods": ["grpo", "aero"], "priority": 3}
        r = client.post("/api/sweeps", json=body, headers=h["alice"])
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "priority"], r.text
        assert "AERO_PRIORITY_MAX_MEMBER" in r.json()["detail"][0]["msg"]
        assert stored(session) == (0, 0)
        r = client.post("/api/sweeps", json=body, headers=h["root"])
        assert r.status_code == 201, r.text
        assert [run["priority"] for run in r.json()["runs"]] == [3, 3]
        assert client.post("/api/runs", json={"config": TINY, "priority": 5}, headers=h["root"]).status_code == 422
        assert client.get("/api/me", headers=h["alice"]).json()["max_priority"] == 2
