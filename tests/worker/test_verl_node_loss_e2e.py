"""A verl run over two Ray nodes, through the platform (REST, a Celery worker on the operator's
cluster, the store), loses a node mid-run: the platform retries it. The worker re-queues the run
(``re-queued: attempt 1 lost a node``, a ``run.retry`` audit event) and sends a ticket; the second
attempt waits, visibly, until the cluster has two nodes again, then resumes from the last
checkpoint and completes with every step stored once. The cluster is a head (as ``aero worker
--gpus`` starts one) and a node joined at 127.0.0.2, one logical GPU each
(tests/trainer/verl/test_multinode.py runs the same cluster without the platform)."""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("verl")

from backend.db import audit  # noqa: E402
from backend.db.session import session_scope  # noqa: E402
from tests.trainer.verl.test_multinode import NODE_IP, start_node, wait_for_second_node  # noqa: E402
from tests.worker.runs import run_row, stored_steps  # noqa: E402
from tests.worker.test_verl_e2e import VERL, at_step  # noqa: E402
from worker import ray_head  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture
def two_nodes(monkeypatch):
    from ray._private.authentication_test_utils import reset_auth_token_state

    for k, v in ray_head.auth_env().items():  # the platform's processes copy this environment
        monkeypatch.setenv(k, v)
    reset_auth_token_state()
    head, address = ray_head.start_head(["0"])
    state = {"address": address, "node": start_node(address)}
    try:
        wait_for_second_node(address)
        yield state
    finally:
        ray_head.stop_head(state["node"])
        ray_head.stop_head(head)
        reset_auth_token_state()


def test_a_run_that_loses_a_node_is_retried_by_the_platform(platform, pg_url, two_nodes):
    steps = 4
    p = platform(pg_url, "redis", AERO_MAX_NODES=2, AERO_MAX_ATTEMPTS=3)
    p.start_api()
    w = p._spawn("worker", [sys.executable, "-m", "cli.main", "worker", "-Q", p.queue, "-c", "1",
                            "--ray-address", two_nodes["address"]])
    p.wait(lambda: "ready." in w.log_path.read_text(errors="replace"), 180, "worker ready", w)
    with p.client() as c:
        rid = p.submit(c, method="grpo", steps=steps, checkpoint_every=1, aero=None,
                       resources={"gpus_per_node": 1, "nodes": 2}, **{k: v for k, v in VERL.items() if k != "aero"})
        p.wait(lambda: at_step(pg_url, rid, 2), 600, "step 2 on two nodes", w, every=0.5)
        assert NODE_IP in c.get(f"/runs/{rid}").json()["placement"]["node_ips"]
        os.killpg(two_nodes["node"].pid, 9)  # the second node's raylet and everything on it
        # the retry: re-queued by the worker, then claimed again; it waits while the cluster has one node
        waiting = p.wait(lambda: (r := c.get(f"/runs/{rid}").json())["attempts"] == 2 and r["waiting_for"] and r,
                         300, "the second attempt waiting for its second node", w, every=0.5)
        assert waiting["state"] == "waiting" and "2 nodes" in waiting["waiting_for"], waiting
        ray_head.stop_head(two_nodes["node"])
        two_nodes["node"] = start_node(two_nodes["address"])
        p.wait(lambda: run_row(pg_url, rid).status in ("succeeded", "failed"), 600, "the retried run to finish", w,
               every=1.0)
        run = c.get(f"/runs/{rid}").json()
    assert run["status"] == "succeeded" and run["attempts"] == 2 and run["error"] is None, run
    assert [s for s, _ in stored_steps(pg_url, rid)] == list(range(1, steps + 1))  # each step exactly once
    with session_scope(pg_url) as s:
        events, _ = audit.list_events(s, action=["run.retry"], target=f"run:{rid}")
        assert [e.before["attempt"] for e in events] == [1] and "lost a node" in events[0].before["error"]
    assert "Resuming from" in p.logs(n=100_000)
