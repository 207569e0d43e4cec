"""GPU placement through the platform, on real processes: a uvicorn API, ``aero worker --gpus 0,1``
(a Celery worker of four pool processes with a Ray head owning two logical GPUs) and the store.

Four runs that each hold one GPU: two train at once on GPUs 0 and 1, the others wait with
``waiting_for`` saying so (not failed), one of them is cancelled while it waits, the last takes
the first GPU that frees. No two runs that overlap in time share a GPU (benchmarks/placement_load.py
measures the same at 16 runs on 8 GPUs)."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from benchmarks.placement_load import collisions, intervals

pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_runs_never_share_a_gpu_and_a_run_that_does_not_fit_waits(platform, pg_url):
    p = platform(pg_url, "redis")
    p.start_api()
    w = p._spawn("worker", [sys.executable, "-m", "cli.main", "worker", "-Q", p.queue, "-c", "4", "--gpus", "0,1"])
    p.wait(lambda: "ready." in w.log_path.read_text(errors="replace"), 120, "worker ready", w)
    assert "owns GPU(s) 0,1" in w.log_path.read_text(errors="replace")
    with p.client() as c:
        cfg = dict(method="grpo", checkpoint_every=0, resources={"gpus_per_node": 1})
        run = lambda i: c.get(f"/runs/{i}").json()  # noqa: E731
        # two long runs hold both GPUs first, so the cancel below reaches a run that is still waiting (with
        # four short runs at once, a GPU could free between reading waiting_for and the cancel)
        ids = [p.submit(c, steps=40, **cfg) for _ in range(2)]
        p.wait(lambda: all(run(i)["placement"] for i in ids), 240, "both GPUs held", w)
        ids += [p.submit(c, steps=5, **cfg) for _ in range(2)]
        waiting = p.wait(lambda: [r for r in map(run, ids[2:]) if r["status"] == "running" and r["waiting_for"]],
                         240, "a run waiting for its GPU", w)
        # the free count is Ray's view when the wait began (a GPU freed a moment earlier may still count)
        assert re.fullmatch(r"1 GPU\(s\): [01] of this worker's node's 2 free", waiting[0]["waiting_for"]), waiting[0]
        victim = waiting[0]["id"]
        assert c.post(f"/runs/{victim}/cancel").status_code in (200, 202)
        p.wait(lambda: all(run(i)["status"] in ("succeeded", "failed", "cancelled") for i in ids), 400, "all runs end", w)
        runs = [run(i) for i in ids]
    by_id = {r["id"]: r for r in runs}
    assert by_id[victim]["status"] == "cancelled" and by_id[victim]["current_step"] == 0, by_id[victim]
    assert by_id[victim]["placement"] is None and by_id[victim]["waiting_for"] is None
    done = [r for r in runs if r["id"] != victim]
    assert all(r["status"] == "succeeded" for r in done), [(r["id"], r["status"], r["error"]) for r in done]
    assert all(r["gpus"] == 1 and r["placement"]["gpu_ids"][0][0] in ("0", "1") for r in done), done
    assert collisions(intervals(done)) == []
    assert max(r["placement"]["waited_s"] for r in done) > 1.0  # one of them waited for a GPU to free
    # the worker's Ray head dies with it, however the worker dies (here: SIGKILL to its process group)
    port = re.search(r"Ray head at [\d.]+:(\d+)", w.log_path.read_text(errors="replace")).group(1)
    p.kill(w)
    deadline = time.monotonic() + 60
    while head_alive(port):
        assert time.monotonic() < deadline, f"the Ray head on port {port} outlived its worker"
        time.sleep(1)


def head_alive(port: str) -> bool:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return any("ray start --head" in line and f"--port={port}" in line for line in ps.splitlines())
