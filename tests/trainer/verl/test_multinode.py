"""verl over two Ray nodes on this machine: a head as ``aero worker --gpus`` starts it (token auth,
worker/ray_head.py) and a second node joined with ``ray start --address`` (its own IP,
127.0.0.2, so the two are told apart), one logical GPU each. A run with ``resources: {gpus_per_node:
1, nodes: 2}`` holds one placement group per node and verl places one FSDP rank on each.

In order, on one run directory:
1. two steps train with a rank on each node (Ray's GCS: the WorkerDict actors' node ids and the
   run's placement groups), and the run completes;
2. a second run_verl with more steps resumes from step 2; after step 3 is logged the second
   node's ``ray start`` process group is SIGKILLed, and the run fails, within a bound, with a
   RuntimeError naming the lost node (IP and Ray node id) and the checkpoint a retry resumes from,
   not a Ray traceback or a hang; every step reached the sink once;
3. with the node back (a new Ray node), the retry resumes from that checkpoint and completes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("verl")

from trainer.platform import placement  # noqa: E402
from trainer.spec.config import for_method, parse_run_config  # noqa: E402
from trainer.spec.operator_policy import RunPolicy  # noqa: E402
from trainer.platform.sinks import MemorySink  # noqa: E402
from worker import ray_head  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

NODE_IP = "127.0.0.2"
TINY = {"engine": "verl", "device": "cpu", "method": "grpo", "batch_prompts": 8, "n_total": 8, "eval_every": 0,
        "eval_problems": 8, "eval_n": 4, "checkpoint_every": 1, "seed": 3,
        "resources": {"gpus_per_node": 1, "nodes": 2}}
FAIL_WITHIN_S = 120.0  # from the kill to the run's error (Ray declares a node dead after ~15-30 s)
TIMES: dict[str, float] = {}


class CountingSink(MemorySink):
    """A MemorySink that also records every ``log`` call, so a doubled step shows."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.calls.append(step)
        super().log(step, metrics)


def start_node(address: str) -> subprocess.Popen:
    ray_bin = str(Path(sys.executable).parent / "ray")
    return subprocess.Popen([ray_bin, "start", "--block", f"--address={address}", f"--node-ip-address={NODE_IP}",
                             "--num-gpus=1", "--num-cpus=8", "--disable-usage-stats"],
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def alive_nodes() -> dict[str, str]:
    import ray

    return {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}


def wait_for_second_node(address: str, timeout_s: float = 120.0) -> tuple[str, str]:
    """(head node id, second node id) once both are alive; the driver sits on the head."""
    import ray

    with placement.ray_session(address=address):
        deadline = time.monotonic() + timeout_s
        while len(alive_nodes()) < 2:
            assert time.monotonic() < deadline, f"the second node did not join: {alive_nodes()}"
            time.sleep(0.5)
        here = ray.get_runtime_context().get_node_id()
        nodes = alive_nodes()
        assert nodes[here] != NODE_IP, nodes  # the driver is on the head, never on the node the test kills
        (other,) = [n for n, ip in nodes.items() if ip == NODE_IP]
        return here, other


@pytest.fixture(scope="module")
def cluster():
    from ray._private.authentication_test_utils import reset_auth_token_state

    keys = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "AERO_RAY_ADDRESS", "RAY_ADDRESS")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(ray_head.auth_env())
    reset_auth_token_state()  # this process imported Ray before the token existed
    head, address = ray_head.start_head(["0"])
    state = {"address": address, "node": start_node(address)}
    try:
        state["head_id"], state["node_id"] = wait_for_second_node(address)
        os.environ["AERO_RAY_ADDRESS"] = address
        yield state
    finally:
        ray_head.stop_head(state["node"])
        ray_head.stop_head(head)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reset_auth_token_state()
        print("\n[verl 2 nodes] wall seconds per run: " + ", ".join(f"{k} {v:.0f}" for k, v in TIMES.items()))


def config(steps: int):
    return parse_run_config(for_method({**TINY, "steps": steps}, "grpo"), RunPolicy(max_nodes=2))


def where_ranks_are() -> dict:
    """The run's FSDP workers (verl's WorkerDict actors) and placement groups, with node ids, from
    Ray's GCS (the state API needs Ray's dashboard, which this cluster runs without)."""
    import ray
    from ray._private import state

    workers = [a["Address"]["NodeID"] for a in state.actors().values()  # verl's <locals>.WorkerDict
               if a["ActorClassName"].rsplit(".", 1)[-1] == "WorkerDict" and a["State"] == "ALIVE"]
    groups = [sorted(set(g["bundles_to_node_id"].values())) for g in ray.util.placement_group_table().values()
              if g["name"].startswith("aero-") and g["state"] == "CREATED"]
    return {"workers": workers, "groups": groups}


def test_two_nodes_a_lost_node_and_the_retry(cluster, tmp_path, monkeypatch):
    """One test, three run_verl calls on one run directory (tests/conftest.py spreads slow tests
    between fast ones of other modules, which would tear the cluster down between tests)."""
    from trainer.platform.placement import NodeLost
    from trainer.verl.runner import run_verl

    out = tmp_path / "run"
    both = sorted([cluster["head_id"], cluster["node_id"]])

    # 1. two steps, a rank on each node, completed
    seen: dict = {}

    def where_during(step, total, metrics):
        import ray

        if "ranks" not in seen and ray.is_initialized():  # while it trains (not the call after the run)
            seen["ranks"] = where_ranks_are()

    # the operator's network setting on the worker reaches every rank (gloo uses it: lo holds both nodes' IPs)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    sink, t0 = CountingSink(), time.monotonic()
    summary = run_verl(config(2), out, sink, progress=where_during)
    TIMES["2 nodes, steps 1-2"] = time.monotonic() - t0
    assert summary["status"] == "completed" and summary["last_step"] == 2, summary
    network = summary["placement"]["network"]
    assert sorted(n["node_ip"] for n in network) == sorted(summary["placement"]["node_ips"]), network
    assert all(n["env"]["GLOO_SOCKET_IFNAME"] == "lo" for n in network), network
    assert sorted(summary["placement"]["nodes"]) == both, summary["placement"]
    assert NODE_IP in summary["placement"]["node_ips"], summary["placement"]
    assert sorted(seen["ranks"]["workers"]) == both, seen  # one FSDP rank on each node
    assert sorted(n for g in seen["ranks"]["groups"] for n in g) == both, seen  # one group per node
    assert sink.calls == [1, 2] and all(m["rollout/trained"] == 64 for m in sink.steps.values())
    actor = out / "verl_checkpoints" / "global_step_2" / "actor"
    assert sorted(p.name for p in actor.glob("model_world_size_*")) == [
        "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]
    first = dict(sink.steps)

    # 2. more steps: resumes from step 2; the second node is killed once step 3 is logged
    killed: dict = {}

    def kill_after_step_3(step, total, metrics):
        if step >= 3 and "t" not in killed:  # the first step this call trained
            os.killpg(cluster["node"].pid, signal.SIGKILL)  # the node's raylet, its workers, its rollout server
            killed["t"], killed["step"] = time.monotonic(), step

    sink, t0 = CountingSink(), time.monotonic()
    with pytest.raises(RuntimeError) as err:
        run_verl(config(4), out, sink, progress=kill_after_step_3)
    TIMES["2 nodes, resumed, node killed"] = time.monotonic() - t0
    assert "t" in killed, f"the run failed before its third step: {err.value!r}"
    failed_after = time.monotonic() - killed["t"]
    assert failed_after < FAIL_WITHIN_S, failed_after
    assert isinstance(err.value, NodeLost), repr(err.value)  # a RuntimeError of ours, not Ray's
    text = str(err.value)
    assert f"{NODE_IP} (Ray node id {cluster['node_id']})" in text, text
    assert "resumes from its last checkpoint, step 3" in text, text
    assert "left the Ray cluster" in text, text
    # steps 1-2 re-forwarded from the run directory unchanged, step 3 trained here; nothing twice
    assert sink.calls == [1, 2, 3], sink.calls
    assert all(sink.steps[s] == first[s] for s in (1, 2))
    assert (out / "verl_checkpoints" / "global_step_3").is_dir()
    how = type(err.value.__cause__).__name__ if err.value.__cause__ else "the launcher's liveness poll"
    print(f"\n[verl 2 nodes] node killed after step {killed['step']}: the run failed {failed_after:.1f} s later "
          f"({how}): {text}")

    # 3. the node back (a new Ray node): the retry resumes from step 3 and completes
    ray_head.stop_head(cluster["node"])
    cluster["node"] = start_node(cluster["address"])
    head, node = wait_for_second_node(cluster["address"])
    assert head == cluster["head_id"] and node != cluster["node_id"]
    sink, t0 = CountingSink(), time.monotonic()
    summary = run_verl(config(4), out, sink)
    TIMES["2 nodes, retried"] = time.monotonic() - t0
    assert summary["status"] == "completed" and summary["last_step"] == 4, summary
    assert sorted(summary["placement"]["nodes"]) == sorted([head, node])
    assert sink.calls == [1, 2, 3, 4], sink.calls  # 1-3 re-forwarded from the run directory, 4 trained
    assert all(sink.steps[s] == first[s] for s in (1, 2))
    assert (out / "verl_checkpoints" / "global_step_4").is_dir()

    # 4. an interface no node has: the run fails before any step, naming it (not a gloo timeout)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nosuch0")
    sink = CountingSink()
    with pytest.raises(placement.PlacementError) as err:
        run_verl(config(6), out, sink)
    assert "GLOO_SOCKET_IFNAME='nosuch0' matches no network interface" in str(err.value), str(err.value)
    assert NODE_IP in str(err.value) and all(s <= 4 for s in sink.calls)  # nothing trained
