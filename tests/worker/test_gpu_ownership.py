"""No phantom GPUs: a worker without the operator's cluster declares to its Ray only the GPUs it
can see (or its --gpus), so a run is never placed on a GPU that does not exist and two runs never
share one; a run that asks for more than the worker can ever give is refused at claim, naming the
number and the worker. The device count is faked (``CUDA_VISIBLE_DEVICES``, or NVML's count
replaced): this host has no GPU, so Ray's GPUs here are logical ones."""

from __future__ import annotations

import sys

import pytest

from tests.worker.runs import run_row as get_run
from trainer.spec.config import parse_run_config
from worker.ray_head import OWNED_ENV, gpu_claim_issue, owned_gpus, visible_gpus
from worker.settings import WorkerSettings

WS = WorkerSettings(stale_after_s=60.0, heartbeat_s=5.0, max_attempts=3)


@pytest.mark.parametrize("env,nvml,expected", [
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, 8, ["0", "1"]),  # the variable wins over what NVML counts
    ({"CUDA_VISIBLE_DEVICES": " 3 , 5 "}, 8, ["3", "5"]),
    ({"CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-bb"}, 8, ["GPU-aa", "GPU-bb"]),
    ({"CUDA_VISIBLE_DEVICES": ""}, 8, []),
    ({"CUDA_VISIBLE_DEVICES": "-1"}, 8, []),
    ({}, 3, ["0", "1", "2"]),
    ({}, 0, []),
])
def test_the_gpus_a_worker_can_see(env, nvml, expected):
    assert visible_gpus(env, nvml_count=lambda: nvml) == expected


def test_no_driver_means_no_gpu():
    def broken():
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    assert visible_gpus({}, nvml_count=broken) == []


def test_a_worker_owns_its_flag_or_else_what_it_sees_unless_it_joins_a_cluster():
    assert owned_gpus("2,3", None, ["0", "1", "2", "3"]) == ["2", "3"]
    assert owned_gpus(None, None, ["0", "1"]) == ["0", "1"]
    assert owned_gpus(None, "10.0.0.1:6379", ["0", "1"]) == []  # the operator's cluster places the runs
    assert owned_gpus(None, None, []) == []


def cfg(**kw):
    return parse_run_config({"steps": 2, **kw})


def verl_cpu(gpus: int):
    return cfg(engine="verl", method="grpo", device="cpu", resources={"gpus_per_node": gpus})


def test_the_claim_check_names_the_number_and_the_worker():
    field, msg = gpu_claim_issue(verl_cpu(3), 2, "host-a:12:34")
    assert field == "resources.gpus_per_node" and "asks for 3 GPU(s)" in msg and "host-a:12:34 owns 2" in msg
    assert gpu_claim_issue(verl_cpu(2), 2, "w") is None  # fits (it may wait for them, never for ever)
    assert gpu_claim_issue(verl_cpu(8), None, "w") is None  # the operator's cluster may grow: not refused here
    field, msg = gpu_claim_issue(cfg(device="cuda"), 0, "host-b:1:2")
    assert field == "device" and "host-b:1:2 sees none" in msg
    assert gpu_claim_issue(cfg(device="cpu"), 0, "w") is None  # a CPU run holds no GPU
    assert gpu_claim_issue(verl_cpu(2), 0, "w") is None  # logical GPUs of a Ray of its own, on a GPU-less worker


@pytest.mark.parametrize("owned,config,field", [
    ("1", {"engine": "verl", "method": "grpo", "resources": {"gpus_per_node": 2}}, "resources.gpus_per_node"),
    ("0", {"device": "cuda"}, "device"),
])
def test_a_run_that_can_never_be_placed_fails_at_claim_before_any_compute(db_url, make_run, tmp_path, monkeypatch,
                                                                          owned, config, field):
    # the environment `aero worker` gives its pool: a head owning `owned` GPUs (or none), no cluster
    from backend.settings import Settings
    from worker.runner import execute_run

    monkeypatch.setenv(OWNED_ENV, owned)
    monkeypatch.delenv("AERO_RAY_ADDRESS", raising=False)
    rid = make_run(**config)
    assert execute_run(rid, Settings(data_dir=tmp_path, database_url=db_url), WS) == "failed"
    r = get_run(db_url, rid)
    assert r.error.startswith(f"ConfigError: {field}:") and r.worker in r.error, r.error
    assert r.current_step == 0 and not (tmp_path / "runs" / str(rid) / "metrics.jsonl").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_worker_without_flags_owns_exactly_the_gpus_it_sees(platform, pg_url):
    # two faked visible GPUs: the worker starts a Ray head owning exactly those (logical here), and a
    # run asking for three is refused at claim instead of waiting for ever
    pytest.importorskip("ray")
    p = platform(pg_url, "redis")
    p.start_api()
    w = p._spawn("worker", [sys.executable, "-m", "cli.main", "worker", "-Q", p.queue, "-c", "2"],
                 CUDA_VISIBLE_DEVICES="0,1")
    p.wait(lambda: "ready." in w.log_path.read_text(errors="replace"), 120, "worker ready", w)
    assert "owns GPU(s) 0,1" in w.log_path.read_text(errors="replace")
    with p.client() as c:
        rid = p.submit(c, engine="verl", method="grpo", resources={"gpus_per_node": 3}, aero=None)
        run = p.wait(lambda: (r := c.get(f"/runs/{rid}").json())["status"] == "failed" and r, 120, "refused", w)
    assert "asks for 3 GPU(s)" in run["error"] and "owns 2" in run["error"] and run["worker"] in run["error"], run
    assert run["current_step"] == 0 and run["placement"] is None
