"""POST /api/sweeps expands methods x seeds x overrides into one run each; GET returns them."""

import pytest

from backend.services.sweeps import apply_override, expand_grid, run_name
from trainer.spec.config import OptimConfig
from trainer.spec.config_renames import ConfigDeprecationWarning

BASE = {"steps": 3, "batch_prompts": 4, "eval_every": 0}


def test_apply_override_dotted_and_nested():
    base = {"a": 1, "aero": {"n_explore": 8, "k": 1.0}}
    assert apply_override(base, {"aero.n_explore": 4, "a": 2}) == {"a": 2, "aero": {"n_explore": 4, "k": 1.0}}
    assert apply_override(base, {"aero": {"k": 2.0}}) == {"a": 1, "aero": {"n_explore": 8, "k": 2.0}}
    assert apply_override(base, {"aero": {}}) == base
    assert base == {"a": 1, "aero": {"n_explore": 8, "k": 1.0}}  # not mutated


def test_an_override_that_changes_the_task_drops_the_base_tasks_section():
    base = {"task": "code", "preset": None, "code": {"memory_mb": 512}, "steps": 3}
    assert apply_override(base, {"task": "math"}) == {"task": "math", "preset": None, "steps": 3}
    assert apply_override(base, {"steps": 4})["code"] == {"memory_mb": 512}  # same task: kept
    assert apply_override(base, {"task": "math", "code.workers": 2})["code"] == {"memory_mb": 512, "workers": 2}


def test_expand_grid_order_and_names():
    pts = expand_grid({"seed": 9, "method": "x"}, ["grpo", "aero"], [0, 1], [{}, {"steps": 5}])
    assert [(p.override_index, p.method, p.seed) for p in pts] == [
        (0, "grpo", 0), (0, "grpo", 1), (0, "aero", 0), (0, "aero", 1),
        (1, "grpo", 0), (1, "grpo", 1), (1, "aero", 0), (1, "aero", 1)]
    assert pts[-1].config == {"seed": 1, "method": "aero", "steps": 5}
    assert run_name("sw", pts[-1], 2) == "sw/aero/s1/o1" and run_name("sw", pts[0], 1) == "sw/grpo/s0"


DEFAULT_LR = OptimConfig().lr  # the base leaves lr at its default


def test_sweep_creates_one_run_per_grid_point(client, auth, enqueued):
    body = {"name": "cmp", "base": BASE, "methods": ["grpo", "dapo", "aero"], "seeds": [0, 1],
            "overrides": [{}, {"aero.n_explore": 4, "optim": {"lr": 5e-5}}], "tags": ["demo"]}
    r = client.post("/api/sweeps", json=body, headers=auth)
    assert r.status_code == 201, r.text
    sw = r.json()
    assert len(sw["runs"]) == 12 and sw["status_counts"]["queued"] == 12
    # each run keeps the sections its method reads: the aero override reaches AERO's runs only
    combos = {(x["method"], x["config"]["seed"], (x["config"].get("aero") or {}).get("n_explore"), x["config"]["optim"]["lr"])
              for x in sw["runs"]}
    assert combos == {(m, s, n if m == "aero" else None, lr) for m in ("grpo", "dapo", "aero") for s in (0, 1)
                      for n, lr in ((8, DEFAULT_LR), (4, 5e-5))}
    assert all(("dapo" in x["config"]) == (x["method"] == "dapo") for x in sw["runs"])
    assert all(x["sweep_id"] == sw["id"] and x["tags"] == ["demo"] and x["config"]["steps"] == 3 for x in sw["runs"])
    assert sorted(i for i, _ in enqueued.sent) == sorted(x["id"] for x in sw["runs"])
    got = client.get(f"/api/sweeps/{sw['id']}").json()
    assert [x["id"] for x in got["runs"]] == [x["id"] for x in sw["runs"]] and got["spec"]["seeds"] == [0, 1]
    assert client.get(f"/api/runs?sweep_id={sw['id']}&method=aero").json()["count"] == 4


def test_former_fields_work_in_a_sweeps_base_and_overrides(client, auth):
    """rollout_engine is read as rollout.sampler in the base and in an override, where it
    overrides the base's sampler; a dotted aero.schedule override is rollout.schedule; the
    response warns (299) once per field."""
    body = {"base": {**BASE, "rollout_engine": "embedded"}, "methods": ["aero"],
            "overrides": [{}, {"rollout_engine": "vllm"}, {"sampler_rng": "per-row", "aero.schedule": "continuous"}]}
    with pytest.warns(ConfigDeprecationWarning, match="use rollout.sampler"):
        r = client.post("/api/sweeps", json=body, headers=auth)
    assert r.status_code == 201, r.text
    runs = [x["config"] for x in r.json()["runs"]]
    assert [c["rollout"]["sampler"] for c in runs] == ["hf", "vllm", "hf"]
    assert [c["rollout"]["schedule"] for c in runs] == ["calls", "calls", "continuous"]
    assert all("rollout_engine" not in c and "schedule" not in c["aero"] for c in runs)
    assert r.headers.get_list("warning") == [
        '299 - "run config field rollout_engine is deprecated: use rollout.sampler (rollout_engine=embedded is '
        'rollout.sampler=hf, rollout_engine=vllm is rollout.sampler=vllm)"',
        '299 - "run config field sampler_rng is deprecated: use rollout.rng (the same values)"',
        '299 - "run config field aero.schedule is deprecated: use rollout.schedule (the same values)"']


def test_seeds_default_to_the_base_seed(client, auth):
    sw = client.post("/api/sweeps", json={"base": {**BASE, "seed": 7}, "methods": ["grpo", "aero"]}, headers=auth).json()
    assert [(x["method"], x["config"]["seed"]) for x in sw["runs"]] == [("grpo", 7), ("aero", 7)]


def test_invalid_grid_point_is_422_naming_override_and_field_and_stores_nothing(client, auth, enqueued):
    body = {"base": BASE, "methods": ["aero"], "overrides": [{}, {"aero.n_explore": 32}]}
    r = client.post("/api/sweeps", json=body, headers=auth)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "overrides", 1, "aero", "n_explore"]
    r = client.post("/api/sweeps", json={"base": {**BASE, "aero": {"k": 0.5}}, "methods": ["aero"]}, headers=auth)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "base", "aero", "k"]
    r = client.post("/api/sweeps", json={"base": {**BASE, "optim": {"lr": -1}}, "methods": ["aero"]}, headers=auth)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "base", "optim", "lr"]
    for bad in ({"methods": []}, {"methods": ["ppo"]}, {"methods": ["grpo"], "seeds": [-1]}, {"methods": ["grpo"], "overrides": []}):
        assert client.post("/api/sweeps", json={"base": BASE, **bad}, headers=auth).status_code == 422, bad
    # a section no method of the sweep reads would be dropped from every run: refused, named
    r = client.post("/api/sweeps", json={"base": BASE, "methods": ["grpo"], "overrides": [{"aero.k": 2}]}, headers=auth)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "overrides", 0, "aero"]
    r = client.post("/api/sweeps", json={"base": {**BASE, "dapo": {"eps_high": 0.3}}, "methods": ["grpo", "aero"]},
                    headers=auth)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "base", "dapo"]
    too_big = {"base": BASE, "methods": ["grpo", "aero"], "seeds": list(range(64)), "overrides": [{}] * 5}
    assert client.post("/api/sweeps", json=too_big, headers=auth).status_code == 422
    assert client.get("/api/runs").json()["count"] == 0 and enqueued.sent == []


def test_list_sweeps_newest_first_with_status_counts(client, auth, enqueued):
    for name in ("first", "second"):
        r = client.post("/api/sweeps", json={"name": name, "base": BASE, "methods": ["grpo", "aero"], "seeds": [0, 1]},
                        headers=auth)
        assert r.status_code == 201, r.text
    page = client.get("/api/sweeps?limit=1").json()
    assert page["count"] == 2 and page["limit"] == 1 and [s["name"] for s in page["data"]] == ["second"]
    assert page["data"][0]["run_count"] == 4 and page["data"][0]["status_counts"]["queued"] == 4
    rest = client.get("/api/sweeps?limit=1&offset=1").json()
    assert [s["name"] for s in rest["data"]] == ["first"]
    assert client.get("/api/sweeps?limit=0").status_code == 422


def test_a_sweep_over_staleness_makes_one_run_per_k_and_refuses_a_bad_k_by_field(client, auth, enqueued):
    """offpolicy.max_staleness is an ordinary swept key: dotted or nested, each point validated
    (bounds, and the cross-field rules: the vLLM sampler runs no stale rows) before anything is stored."""
    body = {"name": "async", "base": BASE, "methods": ["grpo", "aero"], "seeds": [0],
            "overrides": [{"offpolicy.max_staleness": 0}, {"offpolicy.max_staleness": 1},
                          {"offpolicy": {"max_staleness": 2, "correction": "mis"}}]}
    r = client.post("/api/sweeps", json=body, headers=auth)
    assert r.status_code == 201, r.text
    got = [(x["method"], x["config"]["offpolicy"]) for x in r.json()["runs"]]
    assert got == [(m, {"max_staleness": k, "correction": c, "is_cap": 2.0})
                   for k, c in ((0, "tis"), (1, "tis"), (2, "mis")) for m in ("grpo", "aero")]
    for override, loc, why in (({"offpolicy.max_staleness": 9}, ["offpolicy", "max_staleness"], "less than or equal to 8"),
                               ({"offpolicy.max_staleness": 1, "sampler": "vllm"}, ["offpolicy", "max_staleness"], "sampler=hf")):
        r = client.post("/api/sweeps", json={**body, "overrides": [{}, override]}, headers=auth)
        assert r.status_code == 422, override
        detail = r.json()["detail"][0]
        assert detail["loc"] == ["body", "overrides", 1, *loc] and why in detail["msg"], detail
    assert client.get("/api/runs").json()["count"] == 6 and len(enqueued.sent) == 6  # only the first sweep's
