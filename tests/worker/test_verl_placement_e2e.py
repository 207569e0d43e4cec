"""verl runs placed by a worker's Ray (``aero worker --gpus 0,1``: a Ray head of the worker's own
with two logical GPUs), submitted over REST:

* two runs of one GPU each at once: both finish, on disjoint GPUs, each as a Ray job of its own;
  the first to end frees only its own placement group (the old release() removed every group on
  the cluster and tore the other run down);
* one AERO run of two FSDP ranks (``resources.gpus_per_node: 2``): SIGKILLed with its worker
  (Ray head and all) after a checkpoint, it resumes on a new worker on both GPUs, every step
  stored once, each checkpoint sharded over a world of 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

from benchmarks.placement_load import collisions, intervals  # noqa: E402
from tests.worker.runs import run_row, stored_steps  # noqa: E402
from tests.worker.test_verl_e2e import VERL, at_step, checkpoints  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_two_verl_runs_share_one_ray_on_disjoint_gpus(platform, pg_url):
    p = platform(pg_url, "redis")
    p.start_api()
    w = p._spawn("worker", [sys.executable, "-m", "cli.main", "worker", "-Q", p.queue, "-c", "2", "--gpus", "0,1"])
    p.wait(lambda: "ready." in w.log_path.read_text(errors="replace"), 180, "worker ready", w)
    with p.client() as c:
        # different lengths: the short one ends while the long one trains (and must not be torn down)
        ids = [p.submit(c, method="grpo", steps=n, checkpoint_every=0, **VERL) for n in (2, 4)]
        p.wait(lambda: all(c.get(f"/runs/{i}").json()["status"] in ("succeeded", "failed") for i in ids), 800,
               "both verl runs", w, every=1.0)
        runs = [c.get(f"/runs/{i}").json() for i in ids]
    assert all(r["status"] == "succeeded" for r in runs), [r["error"] for r in runs]
    held = [r["placement"]["gpu_ids"][0][0] for r in runs]
    assert sorted(held) == ["0", "1"], runs  # one logical GPU each, never the same
    assert all(r["placement"]["cluster"] != "own" for r in runs)  # the worker's Ray, not one each
    assert collisions(intervals(runs)) == []
    assert [r["current_step"] for r in runs] == [2, 4]


def gpu_worker(p, name: str):
    w = p._spawn(name, [sys.executable, "-m", "cli.main", "worker", "-Q", p.queue, "-c", "1", "--gpus", "0,1"])
    p.wait(lambda: "ready." in w.log_path.read_text(errors="replace"), 180, f"{name} ready", w)
    return w


def test_two_rank_aero_run_over_rest_survives_sigkill_and_resumes(platform, pg_url):
    steps = 3
    p = platform(pg_url, "redis", AERO_VISIBILITY_TIMEOUT_S=3, AERO_STALE_AFTER_S=600)
    p.start_api()
    w1 = gpu_worker(p, "worker1")
    with p.client() as c:
        rid = p.submit(c, method="aero", steps=steps, checkpoint_every=1, resources={"gpus_per_node": 2}, **VERL)
        assert c.get(f"/runs/{rid}").json()["gpus"] == 2
        p.wait(lambda: at_step(pg_url, rid, 1), 400, "verl step 1 on two ranks", w1, every=0.2)
        p.wait(lambda: checkpoints(pg_url, rid) != [], 120, "the step-1 checkpoint", w1, every=0.2)
        first = c.get(f"/runs/{rid}").json()
        assert sorted(first["placement"]["gpu_ids"][0]) == ["0", "1"], first["placement"]  # both GPUs, one node
        owner = run_row(pg_url, rid).worker
        p.kill(w1)
        gpu_worker(p, "worker2")
        p.wait(lambda: run_row(pg_url, rid).worker not in (None, owner), 120, "another worker to take the run")
        p.wait(lambda: run_row(pg_url, rid).status in ("succeeded", "failed"), 500, "the resumed run to finish")
        run = c.get(f"/runs/{rid}").json()
    assert run["status"] == "succeeded", run["error"]
    assert run["attempts"] == 2 and sorted(run["placement"]["gpu_ids"][0]) == ["0", "1"], run
    assert [s for s, _ in stored_steps(pg_url, rid)] == list(range(1, steps + 1))  # each step exactly once
    assert checkpoints(pg_url, rid) == list(range(1, steps + 1))
    assert "Resuming from" in p.logs(n=100_000)
    actor = Path(p.env["AERO_DATA_DIR"]) / "runs" / str(rid) / "verl_checkpoints" / f"global_step_{steps}" / "actor"
    assert sorted(f.name for f in actor.glob("model_world_size_*")) == [
        "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]
