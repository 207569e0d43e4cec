"""/api/runs/{id}/resume and /alerts, and alert rules and trackers at submit, over HTTP on
SQLite and PostgreSQL: 409 for a run that cannot resume, 422 naming the field for bad rules and
for a webhook host the operator did not allow."""

from fastapi.testclient import TestClient

from backend.db import alerts as alert_repo
from backend.db import runs as repo
from backend.main import create_app
from trainer.spec.operator_policy import RunPolicy

TINY = {"method": "grpo", "steps": 3, "batch_prompts": 4, "eval_every": 0, "eval_problems": 8}


def _create(client, auth, **config):
    r = client.post("/api/runs", json={"config": {**TINY, **config}}, headers=auth)
    assert r.status_code == 201, r.text
    return r.json()


def test_resume_requeues_failed_and_cancelled_runs_only(client, auth, session, enqueued):
    run = _create(client, auth)
    rid = run["id"]
    assert client.post(f"/api/runs/{rid}/resume", headers=auth).status_code == 409  # queued
    repo.claim_run(session, rid, "w")
    repo.mark_failed(session, rid, "boom", worker="w")
    session.commit()
    assert client.post(f"/api/runs/{rid}/resume").status_code == 401  # a token is needed
    r = client.post(f"/api/runs/{rid}/resume", headers=auth)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["status"], body["error"], body["attempts"], body["cancel_requested"]) == ("queued", None, 0, False)
    assert enqueued.sent[-1] == (rid, "cpu") and len(enqueued.sent) == 2
    client.post(f"/api/runs/{rid}/cancel", headers=auth)  # queued -> cancelled
    assert client.post(f"/api/runs/{rid}/resume", headers=auth).json()["status"] == "queued"
    repo.claim_run(session, rid, "w")
    repo.mark_succeeded(session, rid, worker="w")
    session.commit()
    r = client.post(f"/api/runs/{rid}/resume", headers=auth)
    assert r.status_code == 409 and "only a failed or cancelled run resumes" in r.text
    assert client.post("/api/runs/999999/resume", headers=auth).status_code == 404


def test_alerts_route_lists_rules_events_and_stop_reason(client, auth, session):
    rules = [{"kind": "grad_norm_above", "threshold": 5.0, "action": "stop"}, {"kind": "failed"}]
    run = _create(client, auth, alerts={"rules": rules})
    assert run["config"]["alerts"]["rules"][0] == {**rules[0], "patience": None, "benchmark": "overall"}
    rid = run["id"]
    empty = client.get(f"/api/runs/{rid}/alerts").json()
    assert (len(empty["rules"]), empty["webhook"], empty["events"], empty["stop_reason"]) == (2, False, [], None)
    alert_repo.record_alert(session, rid, rule=0, kind="grad_norm_above", step=3, value=7.5, message="grad 7.5",
                            stopped=True)
    assert alert_repo.record_alert(session, rid, rule=0, kind="grad_norm_above", step=4, value=8.0, message="again",
                                   stopped=True) is None  # once per (run, rule)
    repo.claim_run(session, rid, "w")
    alert_repo.set_stop_reason(session, rid, "alert rule 0 (grad_norm_above): grad 7.5", "w")
    session.commit()
    got = client.get(f"/api/runs/{rid}/alerts").json()
    assert [(e["rule"], e["step"], e["value"], e["stopped"]) for e in got["events"]] == [(0, 3, 7.5, True)]
    assert got["stop_reason"].startswith("alert rule 0") and client.get(f"/api/runs/{rid}").json()["stop_reason"]
    assert client.get("/api/runs/999999/alerts").status_code == 404


def test_bad_rules_and_trackers_are_422_naming_the_field(client, auth):
    for config, loc in [({"alerts": {"rules": [{"kind": "entropy_below"}]}}, ["alerts", "rules", 0, "threshold"]),
                        ({"alerts": {"rules": [{"kind": "boom"}]}}, ["alerts", "rules", 0, "kind"]),
                        ({"alerts": {"webhook_url": "file:///etc/passwd"}}, ["alerts", "webhook_url"]),
                        ({"trackers": ["neptune"]}, ["trackers", 0]),
                        ({"trackers": ["wandb", "wandb"]}, ["trackers"])]:
        r = client.post("/api/runs", json={"config": {**TINY, **config}}, headers=auth)
        assert r.status_code == 422, (config, r.text)
        assert ["body", "config", *loc] in [d["loc"] for d in r.json()["detail"]], (config, r.json())


def test_webhook_hosts_are_the_operators_default_deny(make_settings, enqueued, auth):
    hook = {"alerts": {"webhook_url": "https://hooks.example.com/T/1", "rules": [{"kind": "finished"}]}}
    with TestClient(create_app(make_settings(), enqueue=enqueued)) as c:
        r = c.post("/api/runs", json={"config": {**TINY, **hook}}, headers=auth)
        assert r.status_code == 422 and "AERO_WEBHOOK_HOSTS" in r.text
        assert r.json()["detail"][0]["loc"] == ["body", "config", "alerts", "webhook_url"]
    with TestClient(create_app(make_settings(policy=RunPolicy(webhook_hosts=("hooks.example.com",))),
                               enqueue=enqueued)) as c:
        r = c.post("/api/runs", json={"config": {**TINY, **hook}}, headers=auth)
        assert r.status_code == 201, r.text
        assert c.get(f"/api/runs/{r.json()['id']}/alerts").json()["webhook"] is True
