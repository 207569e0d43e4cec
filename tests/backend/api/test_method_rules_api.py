"""POST /api/runs refuses a config its method cannot run (trainer.spec.config's method rule, read
from the method spec) with 422 naming the field, before anything is stored or enqueued."""

T = {"steps": 3, "batch_prompts": 4}


def test_memory_method_without_train_size_is_422_naming_it(client, auth, enqueued):
    r = client.post("/api/runs", json={"config": {**T, "method": "aero-mem-d"}}, headers=auth)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert ["body", "config", "train_size"] in [d["loc"] for d in detail]
    assert "aero-mem-d" in detail[0]["msg"] and "train_size" in detail[0]["msg"]
    assert client.get("/api/runs").json()["count"] == 0 and enqueued.sent == []
    ok = client.post("/api/runs", json={"config": {**T, "method": "aero-mem-d", "train_size": 64}}, headers=auth)
    assert ok.status_code in (200, 201), ok.text
    assert len(enqueued.sent) == 1


def test_methods_api_serves_the_new_spec_fields(client):
    by = {m["name"]: m for m in client.get("/api/methods").json()["methods"]}
    assert by["aero-mem"]["engines"] == ["embedded", "verl"] and by["aero-mem"]["needs_prompt_ids"] is True
    assert [sec["name"] for sec in by["aero-mem"]["sections"]] == ["aero", "aero_mem"]
    assert by["aero"]["needs_prompt_ids"] is False


def test_asynchronous_training_is_refused_at_submit_naming_the_field(client, auth, enqueued):
    for config, field in [({"engine": "verl", "method": "grpo", "offpolicy": {"max_staleness": 1}}, "max_staleness"),
                          ({"offpolicy": {"max_staleness": 1}, "rollout": {"sampler": "vllm"}}, "max_staleness"),
                          ({"offpolicy": {"correction": "clip"}}, "correction"),
                          ({"offpolicy": {"is_cap": 0.5}}, "is_cap")]:
        r = client.post("/api/runs", json={"config": {**T, **config}}, headers=auth)
        assert r.status_code == 422, r.text
        assert ["body", "config", "offpolicy", field] in [d["loc"] for d in r.json()["detail"]], r.json()
    assert client.get("/api/runs").json()["count"] == 0 and enqueued.sent == []
    ok = client.post("/api/runs", json={"config": {**T, "offpolicy": {"max_staleness": 2}}}, headers=auth)
    assert ok.status_code in (200, 201), ok.text
    assert ok.json()["config"]["offpolicy"] == {"max_staleness": 2, "correction": "tis", "is_cap": 2.0}
