"""The arena's methods at submit (POST /api/runs, /api/sweeps): what an engine cannot run, or a
history method without its finite training set, is a 422 naming the field before anything is
stored or enqueued; the arena's sweep is one run per method and seed."""

import pytest

T = {"steps": 3, "batch_prompts": 4, "eval_every": 0}


@pytest.mark.parametrize("config,field", [
    ({"method": "knapsack", "engine": "verl", "shuffle_mini_batches": False}, "train_size"),  # stable ids on verl too
    ({"method": "greso", "engine": "verl", "shuffle_mini_batches": False}, "train_size"),
    ({"method": "knapsack"}, "train_size"),                                  # history needs stable prompt ids
    ({"method": "greso"}, "train_size"),
    ({"method": "speed", "n_total": 4, "speed": {"n_screen": 4}}, "speed.n_screen"),
    ({"method": "knapsack", "train_size": 64, "knapsack": {"n_low": 4, "n_high": 2}}, "knapsack.n_high"),
    ({"method": "greso", "train_size": 64, "greso": {"p_easy": 0.01}}, "greso.p_easy"),
    ({"method": "grpo", "greso": {"p_easy": 0.5}}, "greso"),               # another method's section
])
def test_arena_config_refused_naming_the_field(client, auth, enqueued, config, field):
    r = client.post("/api/runs", json={"config": {**T, **config}}, headers=auth)
    assert r.status_code == 422, r.text
    locs = [d["loc"] for d in r.json()["detail"]]
    assert ["body", "config", *field.split(".")] in locs, locs
    assert client.get("/api/runs").json()["count"] == 0 and enqueued.sent == []


def test_the_arena_methods_run_on_both_engines_the_history_methods_need_prompt_ids(client):
    by = {m["name"]: m for m in client.get("/api/methods").json()["methods"]}
    assert by["speed"]["engines"] == ["embedded", "verl"] and by["speed"]["verl"]["stock_fit"] is False
    for name in ("knapsack", "greso"):
        assert by[name]["engines"] == ["embedded", "verl"] and by[name]["needs_prompt_ids"] is True
    assert [s["name"] for s in by["knapsack"]["sections"]] == ["knapsack"]


def test_arena_sweep_is_one_run_per_method_and_seed(client, auth, enqueued):
    methods = ["grpo", "dapo", "aero", "cppo", "knapsack", "speed", "greso"]
    r = client.post("/api/sweeps", json={"name": "arena", "base": {**T, "train_size": 64}, "methods": methods,
                                         "seeds": [0, 1, 2]}, headers=auth)
    assert r.status_code == 201, r.text
    runs = r.json()["runs"]
    assert len(runs) == 21 and len(enqueued.sent) == 21
    assert {x["config"]["train_size"] for x in runs} == {64}  # every method sees the same finite set
    assert {x["config"]["n_total"] for x in runs} == {runs[0]["config"]["n_total"]}  # one budget per prompt
    no_size = client.post("/api/sweeps", json={"base": T, "methods": ["grpo", "greso"]}, headers=auth)
    assert no_size.status_code == 422 and "train_size" in no_size.json()["detail"][0]["loc"]
