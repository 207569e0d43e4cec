"""Users, roles and ownership through the API, on SQLite and PostgreSQL: a viewer writes
nothing, a member changes only their own runs and sweeps (403, nothing changed), an admin
changes anything; tokens made through the admin-only API work with their role at once, and
revoked ones stop; every change lands in the audit log with its user and before/after."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from backend.db import runs as repo
from backend.db.models import AuditEvent, Run
from backend.db.tokens import create_token
from trainer.spec.config import RunConfig

TINY = {"steps": 2, "batch_prompts": 2, "n_total": 8}


@pytest.fixture
def tokens(session) -> dict[str, dict[str, str]]:
    """Headers for: admin, alice (member), bob (member), vera (viewer)."""
    out = {}
    for name, role in (("admin", "admin"), ("alice", "member"), ("bob", "member"), ("vera", "viewer")):
        _, tok = create_token(session, name, role)
        out[name] = {"Authorization": f"Bearer {tok}"}
    session.commit()
    return out


def submit(client, headers, **cfg) -> dict:
    r = client.post("/api/runs", json={"config": {**TINY, **cfg}}, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()


def count_runs(session) -> int:
    session.expire_all()
    return session.scalar(select(func.count(Run.id)))


def test_runs_record_their_owner_and_list_filters_by_owner(client, tokens):
    a, b = submit(client, tokens["alice"]), submit(client, tokens["bob"])
    assert (a["owner"], b["owner"]) == ("alice", "bob")
    mine = client.get("/api/runs", params={"owner": "alice"}).json()
    assert [r["id"] for r in mine["data"]] == [a["id"]] and mine["count"] == 1
    assert client.get("/api/runs", params={"owner": "nobody"}).json()["count"] == 0


def test_viewer_writes_nothing(client, tokens, session, enqueued):
    run = submit(client, tokens["alice"])
    before = count_runs(session)
    v = tokens["vera"]
    answers = [
        client.post("/api/runs", json={"config": TINY}, headers=v),
        client.post("/api/sweeps", json={"methods": ["grpo"], "base": TINY}, headers=v),
        client.patch(f"/api/runs/{run['id']}", json={"tags": ["x"]}, headers=v),
        client.post(f"/api/runs/{run['id']}/cancel", headers=v),
        client.delete(f"/api/runs/{run['id']}", headers=v),
        client.post("/api/tokens", json={"name": "sneaky", "role": "admin"}, headers=v),
    ]
    assert [r.status_code for r in answers] == [403] * 6, [r.text for r in answers]
    assert "viewer" in answers[0].json()["detail"] and "only read" in answers[0].json()["detail"]
    assert count_runs(session) == before and len(enqueued.sent) == 1
    assert client.get(f"/api/runs/{run['id']}").json()["tags"] == [] and client.get(f"/api/runs/{run['id']}").json()["status"] == "queued"
    me = client.get("/api/me", headers=v).json()
    assert (me["user"], me["role"], me["may_submit"], me["may_change_others"]) == ("vera", "viewer", False, False)


def test_viewer_reads_when_reads_are_protected(make_settings, enqueued, tokens):
    from fastapi.testclient import TestClient

    from backend.main import create_app

    with TestClient(create_app(make_settings(auth_protect_reads=True), enqueue=enqueued)) as c:
        assert c.get("/api/runs").status_code == 401
        assert c.get("/api/runs", headers=tokens["vera"]).status_code == 200


@pytest.mark.parametrize("action", ["patch", "cancel", "delete"])
def test_member_may_not_change_another_users_run(client, tokens, session, action):
    run = submit(client, tokens["alice"])
    if action == "delete":  # only finished runs are deletable: finish it first
        repo.claim_run(session, run["id"], "w")
        repo.mark_succeeded(session, run["id"])
        session.commit()
    call = {"patch": lambda h: client.patch(f"/api/runs/{run['id']}", json={"notes": "mine now"}, headers=h),
            "cancel": lambda h: client.post(f"/api/runs/{run['id']}/cancel", headers=h),
            "delete": lambda h: client.delete(f"/api/runs/{run['id']}", headers=h)}[action]
    before = client.get(f"/api/runs/{run['id']}").json()
    r = call(tokens["bob"])
    assert r.status_code == 403, r.text
    assert f"run {run['id']} belongs to alice" in r.json()["detail"]
    assert client.get(f"/api/runs/{run['id']}").json() == before  # nothing changed
    assert call(tokens["alice"]).status_code in (200, 204)  # the owner may


def test_admin_may_change_any_run_and_unowned_runs_only_admins(client, tokens, session):
    run = submit(client, tokens["alice"])
    assert client.post(f"/api/runs/{run['id']}/cancel", headers=tokens["admin"]).json()["status"] == "cancelled"
    legacy = repo.create_run(session, RunConfig(**TINY).model_dump(mode="json"), queue="cpu")  # stored before users
    session.commit()
    r = client.patch(f"/api/runs/{legacy.id}", json={"notes": "x"}, headers=tokens["alice"])
    assert r.status_code == 403 and "no recorded owner" in r.json()["detail"]
    assert client.patch(f"/api/runs/{legacy.id}", json={"notes": "x"}, headers=tokens["admin"]).json()["notes"] == "x"


def test_sweeps_have_owners_and_members_delete_only_their_own(client, tokens, session):
    r = client.post("/api/sweeps", json={"methods": ["grpo", "dapo"], "base": TINY}, headers=tokens["alice"])
    assert r.status_code == 201, r.text
    sweep = r.json()
    assert sweep["owner"] == "alice" and {x["owner"] for x in sweep["runs"]} == {"alice"}
    for x in sweep["runs"]:
        repo.request_cancel(session, x["id"])
    session.commit()
    assert client.get("/api/sweeps").json()["data"][0]["owner"] == "alice"
    r = client.delete(f"/api/sweeps/{sweep['id']}", headers=tokens["bob"])
    assert r.status_code == 403 and "belongs to alice" in r.json()["detail"]
    assert client.get(f"/api/sweeps/{sweep['id']}").status_code == 200
    assert client.delete(f"/api/sweeps/{sweep['id']}", headers=tokens["alice"]).status_code == 204


def test_token_api_is_admin_only_and_roles_apply_at_once(client, tokens):
    r = client.post("/api/tokens", json={"name": "carol-laptop", "role": "member", "user": "carol"}, headers=tokens["alice"])
    assert r.status_code == 403 and "admin" in r.json()["detail"]
    assert client.get("/api/tokens", headers=tokens["alice"]).status_code == 403
    r = client.post("/api/tokens", json={"name": "carol-laptop", "role": "member", "user": "carol"}, headers=tokens["admin"])
    assert r.status_code == 201, r.text
    made = r.json()
    assert (made["user"], made["role"], made["name"]) == ("carol", "member", "carol-laptop") and made["token"].startswith("aero_")
    carol = {"Authorization": f"Bearer {made['token']}"}
    assert submit(client, carol)["owner"] == "carol"
    listed = {t["name"]: t for t in client.get("/api/tokens", headers=tokens["admin"]).json()["data"]}
    assert listed["carol-laptop"]["role"] == "member" and "token" not in listed["carol-laptop"]
    assert "carol" in client.get("/api/users", headers=tokens["admin"]).json()
    assert client.delete(f"/api/tokens/{made['id']}", headers=tokens["admin"]).json()["revoked_at"] is not None
    assert client.post("/api/runs", json={"config": TINY}, headers=carol).status_code == 401
    assert client.delete("/api/tokens/999999", headers=tokens["admin"]).status_code == 404
    r = client.post("/api/tokens", json={"name": "x", "role": "owner"}, headers=tokens["admin"])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "role"]


def test_every_change_is_in_the_audit_log_with_before_and_after(client, tokens, session):
    run = submit(client, tokens["alice"])
    client.patch(f"/api/runs/{run['id']}", json={"tags": ["t1"]}, headers=tokens["alice"])
    client.post(f"/api/runs/{run['id']}/cancel", headers=tokens["admin"])
    client.delete(f"/api/runs/{run['id']}", headers=tokens["alice"])
    client.patch(f"/api/runs/{run['id']}", json={"tags": ["t2"]}, headers=tokens["bob"])  # 404: not recorded
    sweep = client.post("/api/sweeps", json={"methods": ["grpo"], "base": TINY}, headers=tokens["bob"]).json()
    made = client.post("/api/tokens", json={"name": "t", "role": "viewer"}, headers=tokens["admin"]).json()
    client.delete(f"/api/tokens/{made['id']}", headers=tokens["admin"])
    assert client.get("/api/audit", headers=tokens["alice"]).status_code == 403
    log = client.get("/api/audit", headers=tokens["admin"]).json()
    seen = [(e["action"], e["user"], e["target"]) for e in reversed(log["data"])]
    rid = run["id"]
    assert seen == [("run.create", "alice", f"run:{rid}"), ("run.patch", "alice", f"run:{rid}"),
                    ("run.cancel", "admin", f"run:{rid}"), ("run.delete", "alice", f"run:{rid}"),
                    ("sweep.create", "bob", f"sweep:{sweep['id']}"), ("token.create", "admin", f"token:{made['id']}"),
                    ("token.revoke", "admin", f"token:{made['id']}")]
    by = {e["action"]: e for e in log["data"]}
    assert by["run.patch"]["before"]["tags"] == [] and by["run.patch"]["after"]["tags"] == ["t1"]
    assert by["run.cancel"]["before"]["status"] == "queued" and by["run.cancel"]["after"]["status"] == "cancelled"
    assert by["run.delete"]["before"]["status"] == "cancelled" and by["run.delete"]["after"] is None
    assert by["run.create"]["after"]["owner"] == "alice" and by["run.create"]["role"] == "member"
    assert by["token.create"]["after"] == {"name": "t", "user": "t", "role": "viewer"}
    only = client.get("/api/audit", params={"user": "alice", "action": "run.patch"}, headers=tokens["admin"]).json()
    assert only["count"] == 1 and only["data"][0]["target"] == f"run:{rid}"
    assert client.get("/api/audit", params={"target": f"run:{rid}"}, headers=tokens["admin"]).json()["count"] == 4


def test_a_refused_change_leaves_no_audit_record(client, tokens, session):
    run = submit(client, tokens["alice"])
    assert client.patch(f"/api/runs/{run['id']}", json={"notes": "x"}, headers=tokens["bob"]).status_code == 403
    session.expire_all()
    assert [a for (a,) in session.execute(select(AuditEvent.action))] == ["run.create"]


def test_resume_follows_ownership_and_is_audited(client, tokens, session, enqueued):
    """POST /runs/{id}/resume is a change like cancel: another member's 403 leaves the run
    cancelled and unsent; the owner's resume queues it again and is in the audit log."""
    run = submit(client, tokens["alice"])
    assert client.post(f"/api/runs/{run['id']}/cancel", headers=tokens["alice"]).json()["status"] == "cancelled"
    sent = len(enqueued.sent)
    for who in ("bob", "vera"):
        r = client.post(f"/api/runs/{run['id']}/resume", headers=tokens[who])
        assert r.status_code == 403, r.text
    assert client.get(f"/api/runs/{run['id']}").json()["status"] == "cancelled" and len(enqueued.sent) == sent
    r = client.post(f"/api/runs/{run['id']}/resume", headers=tokens["alice"])
    assert r.status_code == 200 and r.json()["status"] == "queued", r.text
    assert len(enqueued.sent) == sent + 1
    session.expire_all()
    event = session.scalars(select(AuditEvent).where(AuditEvent.action == "run.resume")).one()
    assert (event.user, event.target, event.before["status"], event.after["status"]) == (
        "alice", f"run:{run['id']}", "cancelled", "queued")


def test_resume_counts_against_the_owners_quota(make_settings, enqueued, tokens, session):
    """A resumed run is queued again, so AERO_QUOTA_ACTIVE_RUNS counts it: 429, nothing changed."""
    from fastapi.testclient import TestClient

    from backend.main import create_app

    with TestClient(create_app(make_settings(quota_active_runs=1), enqueue=enqueued)) as c:
        first = submit(c, tokens["alice"])
        assert c.post(f"/api/runs/{first['id']}/cancel", headers=tokens["alice"]).status_code == 200
        submit(c, tokens["alice"])  # her one active run
        r = c.post(f"/api/runs/{first['id']}/resume", headers=tokens["alice"])
        assert r.status_code == 429, r.text
        assert r.json()["quota"]["limit"] == "AERO_QUOTA_ACTIVE_RUNS"
        assert c.get(f"/api/runs/{first['id']}").json()["status"] == "cancelled"
