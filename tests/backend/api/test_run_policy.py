"""The operator's run policy (trainer/spec/operator_policy.py, docs/deploy.md "Run policy") at submit: a token
holder cannot weaken the code sandbox, exceed a resource cap, or point a run at a file outside
the operator's data roots. Each attempt is a 422 naming the field; nothing is stored or sent.
POST /api/runs and POST /api/sweeps both apply it."""

from __future__ import annotations

import os

import pytest
from fastapi.testclient import TestClient

from backend.main import create_app
from backend.settings import Settings
from trainer.spec.operator_policy import RunPolicy

T = {"steps": 3, "batch_prompts": 4}
HUGE = 2**62


def post(client, auth, config):
    """POST a run; a config with a ``code`` section is a code-task run (the section is the code
    task's), with placeholder paths unless it names its own."""
    if "code" in config and "task" not in config:
        config = {**code_run(), **config}
    return client.post("/api/runs", json={"config": {**T, **config}}, headers=auth)


def detail_for(r, field: str) -> str:
    """The message of the 422 detail item naming ``field`` (dotted), or fail."""
    assert r.status_code == 422, r.text
    loc = ["body", "config", *field.split(".")]
    items = [d for d in r.json()["detail"] if d["loc"] == loc]
    assert items, (field, r.json()["detail"])
    return items[0]["msg"]


def nothing_stored(client, enqueued) -> bool:
    return client.get("/api/runs").json()["count"] == 0 and enqueued.sent == []


# -- the sandbox's isolation, interpreter and uid are the operator's ---------------------------

@pytest.mark.parametrize("code, field, env", [
    ({"network": "audit"}, "code.network", "AERO_SANDBOX_ISOLATION"),          # audit hook only: network reachable
    ({"network": "namespace"}, "code.network", "AERO_SANDBOX_ISOLATION"),
    ({"python": "/bin/sh"}, "code.python", "AERO_SANDBOX_PYTHON"),              # an arbitrary executable
    ({"run_as_uid": 0}, "code.run_as_uid", "AERO_SANDBOX_UID"),                 # another system user (root)
    ({"run_as_uid": 1000}, "code.run_as_uid", "AERO_SANDBOX_UID"),
])
def test_sandbox_operator_settings_are_refused_from_a_run_config(client, auth, enqueued, code, field, env):
    msg = detail_for(post(client, auth, {"code": code}), field)
    assert "operator setting" in msg and env in msg
    assert nothing_stored(client, enqueued)


def test_the_operator_settings_are_not_in_the_schema_nor_stored(client, auth):
    props = client.get("/openapi.json").json()["components"]["schemas"]["CodeConfig"]["properties"]
    assert not {"network", "python", "run_as_uid"} & set(props)
    # even the old defaults are refused (configs stored with them were migrated, Alembic 0009)
    msg = detail_for(post(client, auth, {"code": {"network": "auto", "run_as_uid": 65534}}), "code.run_as_uid")
    assert "AERO_SANDBOX_UID" in msg


def test_audit_hook_fallback_needs_the_operator(client, auth, enqueued):
    msg = detail_for(post(client, auth, {"code": {"audit_hook": "fallback"}}), "code.audit_hook")
    assert "AERO_SANDBOX_AUDIT_HOOK" in msg and nothing_stored(client, enqueued)


# -- caps -------------------------------------------------------------------------------------

@pytest.mark.parametrize("config, field, env", [
    ({"code": {"memory_mb": 1_048_576}}, "code.memory_mb", "AERO_SANDBOX_MAX_MEMORY_MB"),
    ({"code": {"max_processes": 100_000}}, "code.max_processes", "AERO_SANDBOX_MAX_PROCESSES"),
    ({"code": {"max_output_bytes": 1 << 30}}, "code.max_output_bytes", "AERO_SANDBOX_MAX_OUTPUT_BYTES"),
    ({"code": {"test_timeout_s": 600.0, "timeout_s": 3600.0}}, "code.test_timeout_s", "AERO_SANDBOX_MAX_TEST_TIMEOUT_S"),
    ({"code": {"timeout_s": 3600.0}}, "code.timeout_s", "AERO_SANDBOX_MAX_TIMEOUT_S"),
    ({"code": {"workers": 1024}}, "code.workers", "AERO_SANDBOX_MAX_WORKERS"),
    ({"steps": 1_000_000}, "steps", "AERO_MAX_STEPS"),
    ({"batch_prompts": 65_536}, "batch_prompts", "AERO_MAX_BATCH_PROMPTS"),
    ({"n_total": 4096}, "n_total", "AERO_MAX_N_TOTAL"),
    ({"max_new_tokens": HUGE}, "max_new_tokens", "AERO_MAX_NEW_TOKENS"),
    ({"max_prompt_tokens": HUGE}, "max_prompt_tokens", "AERO_MAX_PROMPT_TOKENS"),
    ({"eval_problems": HUGE}, "eval_problems", "AERO_MAX_EVAL_PROBLEMS"),
    ({"aero": {"n_max": HUGE}}, "aero.n_max", "AERO_MAX_AERO_N_MAX"),
    ({"aero": {"k_max": HUGE}}, "aero.k_max", "AERO_MAX_AERO_K_MAX"),
    ({"aero": {"delta_n": HUGE}}, "aero.delta_n", "AERO_MAX_AERO_DELTA_N"),
    ({"method": "dapo", "dapo": {"max_gen_rounds": HUGE}}, "dapo.max_gen_rounds", "AERO_MAX_DAPO_GEN_ROUNDS"),
    ({"aero": {"k": 5000.0}}, "aero.k", "AERO_MAX_AERO_K"),
])
def test_asking_for_more_than_an_operator_cap_is_422_naming_the_field(client, auth, enqueued, config, field, env):
    msg = detail_for(post(client, auth, config), field)
    assert "at most " in msg and f"operator cap {env}" in msg
    assert nothing_stored(client, enqueued)


def test_aero_k_1e308_is_refused_before_compute(client, auth, enqueued):
    detail_for(post(client, auth, {"aero": {"k": 1e308}}), "aero.k")  # it overflowed at step 1 before
    assert nothing_stored(client, enqueued)


@pytest.fixture
def strict_client(make_settings, enqueued):
    """An API whose operator lowered the caps (AERO_SANDBOX_MAX_MEMORY_MB=2048, AERO_MAX_STEPS=10, AERO_MAX_EVAL_N=4)."""
    policy = RunPolicy(sandbox_memory_mb=2048, max_steps=10, max_eval_n=4)
    with TestClient(create_app(make_settings(policy=policy), enqueue=enqueued)) as c:
        yield c


def test_a_lowered_cap_is_named_and_tightening_is_accepted(strict_client, auth, enqueued, tmp_path):
    msg = detail_for(post(strict_client, auth, {"code": {"memory_mb": 4096}}), "code.memory_mb")
    assert msg.endswith("at most 2048 (operator cap AERO_SANDBOX_MAX_MEMORY_MB)")
    assert detail_for(post(strict_client, auth, {"steps": 11}), "steps").endswith("at most 10 (operator cap AERO_MAX_STEPS)")
    assert detail_for(post(strict_client, auth, {"eval_n": 8}), "eval_n").endswith("at most 4 (operator cap AERO_MAX_EVAL_N)")
    assert nothing_stored(strict_client, enqueued)
    # asking for less than the operator allows is always fine
    data = tmp_path / "data"  # the API's data directory: its default data root
    r = post(strict_client, auth, {**code_run(model_path=str(data / "m"), train_data=str(data / "t.jsonl")), "steps": 10,
                                   "eval_n": 2, "code": {"memory_mb": 512, "max_processes": 8, "timeout_s": 5.0}})
    assert r.status_code == 201, r.text
    assert r.json()["config"]["code"]["memory_mb"] == 512


def test_caps_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("AERO_SANDBOX_MAX_MEMORY_MB", "2048")
    monkeypatch.setenv("AERO_MAX_STEPS", "7")
    monkeypatch.setenv("AERO_SANDBOX_ISOLATION", "namespace")
    monkeypatch.setenv("AERO_DATA_ROOTS", os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    pol = Settings(data_dir=tmp_path / "data").run_policy
    assert (pol.sandbox_memory_mb, pol.max_steps, pol.sandbox_isolation) == (2048, 7, "namespace")
    assert pol.data_roots == (tmp_path / "a", tmp_path / "b")
    monkeypatch.delenv("AERO_DATA_ROOTS")
    assert Settings(data_dir=tmp_path / "data").run_policy.data_roots == ((tmp_path / "data").resolve(),)


# -- data roots -------------------------------------------------------------------------------

def code_run(**paths):
    return {"task": "code", "preset": None, "model_path": "MODEL", "train_data": "DATA", **paths}


def test_paths_outside_the_data_roots_are_refused_without_saying_whether_they_exist(client, auth, enqueued, tmp_path):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "admin.token").write_text("aero_secret")
    inside = str(data / "models" / "m")
    escape = data / "models" / "escape"
    escape.parent.mkdir(parents=True, exist_ok=True)
    escape.symlink_to("/etc")  # a symlink inside the root that leads out of it
    bad = ["/etc/shadow", "/etc/no-such-file-anywhere", "/proc/self/environ", "/", str(data / ".." / "x"),
           str(escape), str(escape / "shadow"), str(data / "admin.token"), str(data / "aero.sqlite"),
           str(data / "logs" / "api.log"), "relative/path", "~/.ssh/id_rsa"]
    messages = set()
    for path in bad:
        for field, config in (("model_path", code_run(model_path=path, train_data=inside)),
                              ("train_data", code_run(model_path=inside, train_data=path)),
                              ("benchmarks.APPS", code_run(model_path=inside, train_data=inside, benchmarks={"APPS": path}))):
            messages.add(detail_for(post(client, auth, config), field))
    # one text for all (the 422 may prefix the field's name), whether the path exists or not
    assert {m.split(": ", 1)[-1] for m in messages} == {"must be a path under the operator's data roots (AERO_DATA_ROOTS)"}
    assert nothing_stored(client, enqueued)


def test_paths_under_the_data_roots_are_accepted(client, auth, tmp_path):
    data = tmp_path / "data"
    (data / "models").mkdir(parents=True, exist_ok=True)
    (data / "link").symlink_to(data / "models")  # a symlink that stays inside is fine
    r = post(client, auth, code_run(model_path=str(data / "link" / "qwen"), train_data=str(data / "train.jsonl"),
                                    benchmarks={"APPS": str(data / "apps.jsonl")}))
    assert r.status_code == 201, r.text


def test_the_operator_lists_the_data_roots(make_settings, enqueued, auth, tmp_path):
    roots = (tmp_path / "models", tmp_path / "datasets")
    with TestClient(create_app(make_settings(policy=RunPolicy(data_roots=roots)), enqueue=enqueued)) as c:
        ok = post(c, auth, code_run(model_path=str(roots[0] / "m"), train_data=str(roots[1] / "t.jsonl")))
        assert ok.status_code == 201, ok.text
        # the data directory is no longer a root once the operator lists others
        r = post(c, auth, code_run(model_path=str(roots[0] / "m"), train_data=str(tmp_path / "data" / "t.jsonl")))
        detail_for(r, "train_data")


# -- sweeps apply the same policy -------------------------------------------------------------

def test_sweeps_apply_the_policy_to_the_base_and_every_grid_point(client, auth, enqueued):
    def sweep(base=None, overrides=None):
        body = {"base": {**T, **(base or {})}, "methods": ["aero"], "overrides": overrides or [{}]}
        return client.post("/api/sweeps", json=body, headers=auth)

    r = sweep(base={"code": {"network": "audit"}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "base", "code", "network"]
    r = sweep(base={"steps": 1_000_000})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "base", "steps"]
    r = sweep(overrides=[{}, {**code_run(), "code.memory_mb": 1_048_576}])
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "overrides", 1, "code", "memory_mb"]
    assert "operator cap" in r.json()["detail"][0]["msg"]
    r = sweep(overrides=[{"preset": None, "model_path": "/etc/shadow"}])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "overrides", 0, "model_path"]
    r = sweep(overrides=[{"aero.k": 1e308}])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "overrides", 0, "aero", "k"]
    assert nothing_stored(client, enqueued)
