"""Two verl runs at once on one Ray: ``aero worker --gpus 0,1 -c 2`` (a Ray head of the worker's
own with two logical GPUs), two verl runs of one GPU each submitted over REST. Both finish, on
disjoint GPUs, each as a Ray job of its own: the first to end frees only its own placement group
(the old release() removed every group on the cluster and tore the other run down)."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("verl")

from benchmarks.placement_load import collisions, intervals  # noqa: E402
from tests.worker.test_verl_e2e import VERL  # noqa: E402

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
