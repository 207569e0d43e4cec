"""The installed real model over REST, on SQLite and PostgreSQL: a run on its preset is stored
with the model's measured defaults and can be cancelled and cloned (its stored config submitted
again) as a tiny-preset run can; where the model is not installed on the API's host, the submit is
a 422 naming ``preset`` and the command that installs it, and nothing is stored."""

from backend.db import runs as repo

SMOL = {"preset": "smollm2-135m", "method": "aero", "steps": 2}


def test_a_real_model_run_is_stored_with_its_defaults_cancelled_and_cloned(smollm2, client, auth, session, enqueued):
    r = client.post("/api/runs", json={"config": SMOL}, headers=auth)
    assert r.status_code == 201, r.text
    run = r.json()
    cfg = run["config"]
    assert (cfg["preset"], cfg["task"], cfg["batch_prompts"], cfg["n_total"], cfg["aero"]["n_explore"]) == \
        ("smollm2-135m", "arithmetic", 8, 8, 4)
    assert client.post(f"/api/runs/{run['id']}/cancel", headers=auth).json()["status"] == "cancelled"
    clone = client.post("/api/runs", json={"config": {**cfg, "seed": 1}}, headers=auth)  # what `aero clone` sends
    assert clone.status_code == 201, clone.text
    assert {**clone.json()["config"], "seed": 0} == cfg
    r = client.post("/api/runs", json={"config": {**SMOL, "task": "countdown"}}, headers=auth)
    assert r.status_code == 201 and r.json()["config"]["task"] == "countdown"
    assert [rid for rid, _ in enqueued.sent] == [run["id"], clone.json()["id"], r.json()["id"]]


def test_a_model_not_installed_on_the_api_host_is_a_422_with_the_command(client, auth, session, monkeypatch, tmp_path):
    monkeypatch.setenv("AERO_MODELS_DIR", str(tmp_path / "no-models"))
    r = client.post("/api/runs", json={"config": SMOL}, headers=auth)
    assert r.status_code == 422, r.text
    text = r.text
    assert "preset" in text and "aero models install smollm2-135m" in text and str(tmp_path / "no-models") in text
    assert repo.list_runs(session) == ([], 0)  # nothing stored
