"""/api/methods serves every registered method's spec (trainer/methods/spec.py), in display
order, behind the same read access rule as the other read routes, and is in the OpenAPI schema."""

from fastapi.testclient import TestClient

from backend.main import create_app
from trainer.spec.config import RunConfig
from trainer.methods.spec import get_method, method_names


def test_methods_lists_every_spec_in_order(client):
    r = client.get("/api/methods")
    assert r.status_code == 200
    methods = r.json()["methods"]
    assert [m["name"] for m in methods] == list(method_names())
    by = {m["name"]: m for m in methods}
    assert by["aero-s1s2"]["strategies"] == {"s1": True, "s2": True, "s3": False}
    assert by["dapo"]["clip"] == "clip-higher" and by["dapo"]["loss_agg"] == RunConfig(method="dapo").effective_loss_agg
    assert by["aero"]["verl"] == {"rollout_n": "n_explore", "adv_estimator": "grpo", "stock_fit": False}
    assert by["grpo"]["colour"] == get_method("grpo").display.colour and by["grpo"]["sections"] == []
    assert len({m["colour"] for m in methods}) == len(methods)  # one colour per method


def test_methods_in_openapi_with_a_response_model(client):
    op = client.get("/openapi.json").json()["paths"]["/api/methods"]["get"]
    assert op["responses"]["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/MethodsPublic"}


def test_methods_read_access(make_settings, enqueued, auth):
    with TestClient(create_app(make_settings(auth_protect_reads=True), enqueue=enqueued)) as c:
        assert c.get("/api/methods").status_code == 401
        assert c.get("/api/methods", headers=auth).status_code == 200
