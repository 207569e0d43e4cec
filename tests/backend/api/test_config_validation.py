"""POST /api/runs answers every invalid config with 422 and a detail item whose ``loc`` names
the field and whose message says what to do; nothing is stored or enqueued."""

import pytest

T = {"steps": 3, "batch_prompts": 4}

# (config, the field path that must be named)
INVALID = [
    ({"aero": {"n_explore": 20}}, "aero.n_explore"),            # n_explore > n_total (16)
    ({"n_total": 4, "aero": {"n_explore": 8}}, "aero.n_explore"),
    ({"aero": {"n_explore": 0}}, "aero.n_explore"),
    ({"aero": {"n_max": 4}}, "aero.n_max"),                      # n_max < n_explore
    ({"aero": {"k": 0.5}}, "aero.k"),                            # k < 1
    ({"aero": {"k": 0}}, "aero.k"),
    ({"aero": {"alpha0": 0}}, "aero.alpha0"),                    # alpha0 <= 0
    ({"aero": {"alpha0": -1.5}}, "aero.alpha0"),
    ({"aero": {"beta0": 0}}, "aero.beta0"),
    ({"aero": {"S": 5}}, "aero.S"),                              # S > n_explore / 2
    ({"aero": {"tau": 0}}, "aero.tau"),
    ({"aero": {"tau": 1.5}}, "aero.tau"),
    ({"aero": {"delta_n": 0}}, "aero.delta_n"),
    ({"aero": {"negative_selection": "best"}}, "aero.negative_selection"),
    ({"aero": {"unknown_knob": 1}}, "aero.unknown_knob"),
    ({"method": "ppo"}, "method"),                               # unknown method
    ({"method": None}, "method"),
    ({"optim": {"lr": -1e-4}}, "optim.lr"),                      # negative lr
    ({"optim": {"lr": 0}}, "optim.lr"),
    ({"optim": {"warmup_ratio": 1.0}}, "optim.warmup_ratio"),
    ({"optim": {"grad_clip": 0}}, "optim.grad_clip"),
    ({"method": "dapo", "dapo": {"eps_low": 0.3, "eps_high": 0.2}}, "dapo.eps_high"),
    ({"method": "dapo", "dapo": {"overlong_buffer": 12}}, "dapo.overlong_buffer"),  # >= max_new_tokens
    ({"steps": 0}, "steps"),
    ({"steps": "many"}, "steps"),
    ({"batch_prompts": 0}, "batch_prompts"),
    ({"n_total": 1}, "n_total"),
    ({"temperature": 0}, "temperature"),
    ({"top_p": 1.5}, "top_p"),
    ({"clip_eps": 1.0}, "clip_eps"),
    ({"seed": -1}, "seed"),
    ({"engine": "tensorrt"}, "engine"),
    ({"engine": "verl", "method": "aero-mem", "shuffle_mini_batches": False}, "train_size"),  # stable ids on verl too
    ({"preset": None}, "model_path"),                            # neither preset nor model_path
    ({"preset": "tiny", "model_path": "/m"}, "model_path"),      # both
    ({"task": "math", "preset": None, "model_path": "/m"}, "train_data"),
    ({"task": "math", "train_data": "/d.parquet"}, "task"),      # tiny preset is arithmetic only
    ({"mini_batches": 8}, "mini_batches"),                       # > batch_prompts (4)
    ({"device": "tpu"}, "device"),
    ({"name": "x" * 201}, "name"),
    ({"name": "bad\x00name"}, "name"),
    ({"learning_rate": 1e-4}, "learning_rate"),                  # unknown top-level field
    ({"aero": 5}, "aero"),
    ({"seed": 2**70}, "seed"),                                   # the store keeps 64-bit integers
]


@pytest.mark.parametrize("config,field", INVALID, ids=[f"{i}-{f}" for i, (_, f) in enumerate(INVALID)])
def test_invalid_config_is_422_naming_the_field(client, auth, enqueued, config, field):
    r = client.post("/api/runs", json={"config": {**T, **config}}, headers=auth)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    locs = [d["loc"] for d in detail]
    assert ["body", "config", *field.split(".")] in locs, locs
    msg = next(d["msg"] for d in detail if d["loc"] == ["body", "config", *field.split(".")])
    assert len(msg) > 10
    assert client.get("/api/runs").json()["count"] == 0 and enqueued.sent == []


def test_at_least_twenty_distinct_fields_are_covered():
    assert len(INVALID) >= 20 and len({f for _, f in INVALID}) >= 20


def test_messages_say_what_to_do(client, auth):
    def msg(config):
        return client.post("/api/runs", json={"config": {**T, **config}}, headers=auth).json()["detail"][0]["msg"]

    assert "must be <= n_total (16); got 20" in msg({"aero": {"n_explore": 20}})
    assert "greater than or equal to 1" in msg({"aero": {"n_explore": 0}}) and "default 8" in msg({"aero": {"n_explore": 0}})
    assert "remove it or fix its spelling" in msg({"learning_rate": 1}) and "optim" in msg({"learning_rate": 1})
    assert "'grpo', 'dapo', 'aero'" in msg({"method": "ppo"})


def test_several_bad_fields_are_all_named(client, auth):
    r = client.post("/api/runs", json={"config": {**T, "aero": {"k": 0.5, "alpha0": 0, "beta0": -1}}}, headers=auth)
    locs = {tuple(d["loc"]) for d in r.json()["detail"]}
    assert {("body", "config", "aero", f) for f in ("k", "alpha0", "beta0")} <= locs


def test_non_finite_numbers_are_rejected(client, auth):
    hj = {**auth, "content-type": "application/json"}
    r = client.post("/api/runs", content='{"config": {"aero": {"alpha0": NaN}}}', headers=hj)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "config", "aero", "alpha0"]
    r = client.post("/api/runs", content='{"config": {"optim": {"lr": Infinity}}}', headers=hj)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "config", "optim", "lr"]



def test_verl_rules_are_a_422_at_submit(client, auth, enqueued, tmp_path):
    """A config only the verl engine refuses is answered before anything is stored or sent."""
    data = tmp_path / "data"  # the test app's data directory: the default data root
    verl = {"engine": "verl", "preset": None, "model_path": str(data / "models" / "qwen"), "task": "math",
            "train_data": str(data / "train.jsonl")}
    r = client.post("/api/runs", json={"config": {**verl, "batch_prompts": 12, "mini_batches": 3}}, headers=auth)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "config", "shuffle_mini_batches"]
    verl["shuffle_mini_batches"] = False  # verl lays mini-batches out in order: the config must say so
    r = client.post("/api/runs", json={"config": {**verl, "batch_prompts": 10, "mini_batches": 3}}, headers=auth)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert [d["loc"] for d in detail] == [["body", "config", "mini_batches"]]
    assert "multiple of mini_batches on verl" in detail[0]["msg"]
    r = client.post("/api/runs", json={"config": {**verl, "task": "code"}}, headers=auth)
    assert r.status_code == 422 and ["body", "config", "task"] in [d["loc"] for d in r.json()["detail"]]
    assert client.get("/api/runs").json()["count"] == 0 and enqueued.sent == []
    r = client.post("/api/runs", json={"config": {**verl, "batch_prompts": 12, "mini_batches": 3}}, headers=auth)
    assert r.status_code == 201, r.text
    assert len(enqueued.sent) == 1
