"""Placement on a real Ray cluster on this machine (logical GPUs: Ray hands them out exactly as
it hands out real ones; only CUDA_VISIBLE_DEVICES has no device behind it).

The cluster is a head the way ``aero worker --gpus 3,5`` starts it (worker/ray_head.py) plus,
for the multi-node tests, a second node joined with ``ray start --address``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from trainer.platform import placement  # noqa: E402
from worker import ray_head  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def stop_after(seconds: float):
    t0 = time.monotonic()
    return lambda: time.monotonic() - t0 > seconds


@pytest.fixture(scope="module")
def cluster():
    """A Ray head owning GPUs 3 and 5 (as ``aero worker --gpus 3,5`` starts it), with a token of its
    own, and a second node of one GPU joined to it. Yields (address, env for joining processes)."""
    from ray._private.authentication_test_utils import reset_auth_token_state

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "AERO_RAY_ADDRESS", "RAY_ADDRESS")}
    os.environ.update(ray_head.auth_env())
    reset_auth_token_state()  # this process imported Ray before the token existed (a worker's pool processes start with it)
    head, address = ray_head.start_head(["3", "5"])
    ray_bin = str(Path(sys.executable).parent / "ray")
    node = subprocess.Popen([ray_bin, "start", "--block", f"--address={address}", "--num-gpus=1", "--num-cpus=8",
                             "--disable-usage-stats"],
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": "0", placement.NO_PRESTART[0]: placement.NO_PRESTART[1]},
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with placement.ray_session(address=address):
            deadline = time.monotonic() + 90
            while len([n for n in ray.nodes() if n["Alive"]]) < 2:
                assert time.monotonic() < deadline, "the second node did not join"
                time.sleep(0.5)
        yield address
    finally:
        ray_head.stop_head(node)
        ray_head.stop_head(head)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reset_auth_token_state()


def test_embedded_holders_never_share_a_gpu_and_a_third_waits_for_a_freed_one(cluster, monkeypatch):
    monkeypatch.setenv("AERO_RAY_ADDRESS", cluster)
    with placement.ray_session() as where:
        assert where == cluster
        here = ray.get_runtime_context().get_node_id()
        a, b = placement.hold_local_gpus(1), placement.hold_local_gpus(1)
        (na, _, ia), (nb, _, ib) = ray.get(a.where.remote()), ray.get(b.where.remote())
        assert na == nb == here  # the run trains in this process: its GPU is on this node
        assert sorted(ia + ib) == ["3", "5"]  # the operator's GPU ids, one each
        texts: list = []
        assert placement.hold_local_gpus(1, should_stop=stop_after(3), on_wait=texts.append) is None
        assert texts and texts[0].startswith("1 GPU(s): 0 of this worker's node's 2 free"), texts
        ray.kill(a)  # a run ends: its GPU is free for the one that waited
        c = placement.hold_local_gpus(1, should_stop=stop_after(60))
        assert ray.get(c.where.remote())[2] == ia


def test_placed_embedded_records_where_and_frees_the_gpu_when_the_run_ends(cluster, monkeypatch):
    monkeypatch.setenv("AERO_RAY_ADDRESS", cluster)
    with placement.placed_embedded(1, device_is_cuda=False) as p:
        assert p.cluster == cluster and len(p.gpu_ids) == 1 and p.gpu_ids[0][0] in ("3", "5")
        held = p.summary()
    assert held["gpu_ids"] == p.gpu_ids and held["waited_s"] >= 0
    with placement.ray_session() as _:  # the holder died with the run's session: both GPUs of the head are free
        deadline = time.monotonic() + 30
        while placement.gpu_counts()[0] < 3:
            assert time.monotonic() < deadline, ray.available_resources()
            time.sleep(0.2)


def test_node_groups_span_two_nodes_and_release_frees_only_the_runs_own(cluster, monkeypatch, tmp_path):
    monkeypatch.setenv("AERO_RAY_ADDRESS", cluster)
    # another run's placement group, made by another job (a driver in another process)
    other = tmp_path / "other.py"
    other.write_text(textwrap.dedent(f"""
        import time, ray
        from ray.util.placement_group import placement_group
        ray.init(address={cluster!r}, namespace="aero")
        g = placement_group([{{"CPU": 1}}], name="other-run")
        ray.get(g.ready())
        print("ready", flush=True)
        time.sleep(120)
    """))
    proc = subprocess.Popen([sys.executable, str(other)], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert proc.stdout.readline().strip() == "ready"
        with placement.ray_session():
            groups = placement.node_groups(1, 2, should_stop=stop_after(60))
            nodes, ips, gpus = placement.describe_groups(groups)
            assert len(set(nodes)) == 2, nodes  # one group on each node (STRICT_PACK per node, both nodes)
            assert all(len(g) == 1 for g in gpus)
            texts: list = []
            # the second node's only GPU is held: a second two-node run waits, and lets go when told to stop
            assert placement.node_groups(1, 2, should_stop=stop_after(3), on_wait=texts.append) is None
            assert texts and "on 2 nodes" in texts[0]
            placement.release_groups(groups)
            table = ray.util.placement_group_table()
            states = {v["name"]: v["state"] for v in table.values()}
            assert states["other-run"] == "CREATED", states  # the other run's group is untouched
            assert all(states[g] == "REMOVED" for g in states if g.startswith("aero-")), states
    finally:
        proc.kill()
        proc.wait()


def test_each_session_is_a_job_with_its_own_runtime_env(cluster):
    def seen(env: dict[str, str]) -> str:
        with placement.ray_session({"env_vars": env}, address=cluster):
            return ray.get(ray.remote(num_cpus=0)(lambda: os.environ.get("AERO_TRACKER_DIR", "")).remote())

    assert seen({"AERO_TRACKER_DIR": "/runs/1"}) == "/runs/1"
    assert seen({"AERO_TRACKER_DIR": "/runs/2"}) == "/runs/2"  # not the first run's, in the same process


def test_without_an_address_a_run_has_a_ray_of_its_own_whatever_the_cluster_file_says(monkeypatch):
    """A crashed ``ray start`` leaves /tmp/ray/ray_current_cluster behind; ray.init() would join it."""
    monkeypatch.delenv("AERO_RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    stale = Path("/tmp/ray/ray_current_cluster")
    before = stale.read_text() if stale.exists() else None
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("127.0.0.1:1\n")  # nothing listens there
    try:
        with placement.ray_session(own_gpus=2) as where:
            assert where == "own"
            assert ray.cluster_resources().get("GPU") == 2
    finally:
        if before is None:
            stale.unlink(missing_ok=True)
        else:
            stale.write_text(before)


@pytest.mark.parametrize("visible,ray_id,index", [(None, "3", 3), ("", "3", 3), ("3,5", "5", 1), ("0,1,2,3", "3", 3)])
def test_local_cuda_index_maps_rays_id_to_this_process(visible, ray_id, index, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert placement.local_cuda_index(ray_id, visible) == index


def test_local_cuda_index_refuses_a_gpu_this_process_cannot_see():
    with pytest.raises(placement.PlacementError, match="CUDA_VISIBLE_DEVICES=0,1"):
        placement.local_cuda_index("5", "0,1")


def test_a_node_that_cannot_see_the_run_directory_is_named_before_any_step(cluster, monkeypatch, tmp_path):
    """A third node in a mount namespace of its own, where a tmpfs hides the run directory's
    parent: what a node without the shared filesystem sees."""
    monkeypatch.setenv("AERO_RAY_ADDRESS", cluster)
    run_dir = tmp_path / "runs" / "7"
    run_dir.mkdir(parents=True)
    ray_bin = str(Path(sys.executable).parent / "ray")
    blind = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                              f"mount -t tmpfs tmpfs {tmp_path} && exec {ray_bin} start --block --address={cluster} "
                              "--num-cpus=2 --num-gpus=0 --resources='{\"blind\": 1}' --disable-usage-stats"],
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with placement.ray_session():
            deadline = time.monotonic() + 90
            while ray.cluster_resources().get("blind", 0) < 1:
                assert time.monotonic() < deadline and blind.poll() is None, "the blind node did not join"
                time.sleep(0.5)
            head = ray.get_runtime_context().get_node_id()
            from ray.util.placement_group import placement_group

            seeing = placement_group([{"CPU": 1}], bundle_label_selector=[{"ray.io/node-id": head}])
            not_seeing = placement_group([{"CPU": 1, "blind": 1}])
            ray.get([seeing.ready(), not_seeing.ready()], timeout=60)
            blind_node = ray.util.placement_group_table(not_seeing)["bundles_to_node_id"][0]
            placement.check_shared_dir([seeing], run_dir)  # the launcher's own node sees it
            with pytest.raises(placement.PlacementError) as e:
                placement.check_shared_dir([seeing, not_seeing], run_dir)
            assert f"node {blind_node[:12]}" in str(e.value) and f"node {head[:12]}" not in str(e.value)
            assert str(run_dir) in str(e.value) and "AERO_DATA_DIR" in str(e.value)
            assert list(run_dir.iterdir()) == []  # the marker is gone either way
            placement.release_groups([seeing, not_seeing])
    finally:
        ray_head.stop_head(blind)


def test_the_operators_network_settings_are_forwarded_and_listed_names_too():
    env = {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5", "HOME": "/root",
           "AERO_RUN_ENV": "HF_HUB_OFFLINE, MY_PROXY", "HF_HUB_OFFLINE": "1", "SECRET": "x"}
    assert placement.forwarded_env(env) == {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0",
                                            "NCCL_IB_HCA": "mlx5", "HF_HUB_OFFLINE": "1"}
    assert placement.forwarded_env({}) == {}


@pytest.mark.parametrize("spec,ok", [("lo", True), ("=lo", True), ("l", True), ("=l", False), ("eth0,lo", True),
                                     ("nosuch0", False), ("^lo", False), ("^nosuch", True)])
def test_interface_specs_follow_nccls_syntax(spec, ok):
    assert placement.ifname_matches(spec, ["lo"]) is ok


def test_each_node_sees_the_forwarded_interface_and_a_bogus_one_is_named(cluster, monkeypatch):
    """Two nodes (the head and the joined one): a task on each, in the run's runtime environment,
    sees GLOO_SOCKET_IFNAME=lo; a name no node has fails before any step, naming it and the nodes."""
    monkeypatch.setenv("AERO_RAY_ADDRESS", cluster)
    from ray.util.placement_group import placement_group

    for value, ok in (("lo", True), ("nosuch0", False)):
        env = {"GLOO_SOCKET_IFNAME": value}
        with placement.ray_session({"env_vars": env}):
            groups = [placement_group([{"GPU": 1}], strategy="STRICT_PACK") for _ in range(3)]
            ray.get([g.ready() for g in groups], timeout=60)
            nodes = {ray.util.placement_group_table(g)["bundles_to_node_id"][0] for g in groups}
            assert len(nodes) == 2  # three GPUs: two on the head, one on the joined node
            try:
                if ok:
                    seen = placement.check_network(groups, env)
                    assert [s["env"] for s in seen] == [{"GLOO_SOCKET_IFNAME": "lo"}] * 3
                else:
                    with pytest.raises(placement.PlacementError) as e:
                        placement.check_network(groups, env)
                    assert "GLOO_SOCKET_IFNAME='nosuch0' matches no network interface" in str(e.value)
                    assert all(f"node {n[:12]}" in str(e.value) for n in nodes), str(e.value)
            finally:
                placement.release_groups(groups)


def eight_gpus(head: str):
    """A stand-in pynvml (RunGpus's test hook, shipped to each node's reader) of 8 GPUs: GPU i is
    10*i % busy with i GiB of 8 used, and 1 % more busy when read off the head node ``head``."""
    from types import SimpleNamespace

    def util(h):
        return SimpleNamespace(gpu=10 * h + (ray.get_runtime_context().get_node_id() != head))

    return SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 8, nvmlDeviceGetHandleByIndex=lambda i: i,
                           nvmlDeviceGetUUID=lambda h: f"GPU-{h}", nvmlDeviceGetUtilizationRates=util,
                           nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=h << 30, total=8 << 30))


def test_a_runs_gpu_metrics_are_read_on_each_of_its_nodes_and_cover_its_gpus_only(cluster, monkeypatch):
    """A two-node run (one GPU on each node): a reader in each node's group reads that node's GPU
    the run holds (the head's 3 or 5, the joined node's 0) there, and nothing else; without NVML
    (this machine) the same read gives no GPU keys."""
    from trainer.platform.system_metrics import GPU_COUNT, GPU_UTIL, RunGpus, SystemMonitor

    monkeypatch.setenv("AERO_RAY_ADDRESS", cluster)
    with placement.ray_session():
        head = ray.get_runtime_context().get_node_id()
        groups = placement.node_groups(1, 2, should_stop=stop_after(60))
        try:
            nodes, _, gpu_ids = placement.describe_groups(groups)
            gpus = RunGpus(groups, gpu_ids, nvml=eight_gpus(head), timeout_s=60)
            m = SystemMonitor(gpus=gpus).gpu()
            expect = [[(10.0 * int(i) + (node != head), int(i) << 30, 8 << 30) for i in ids]
                      for node, ids in zip(nodes, gpu_ids)]
            assert gpus.per_node == expect and sorted(sum(gpu_ids, [])) in (["0", "3"], ["0", "5"]), (gpus.per_node, gpu_ids)
            assert m[GPU_COUNT] == 2 and m[GPU_UTIL] == sum(r[0] for n in expect for r in n) / 2
            assert SystemMonitor(gpus=RunGpus(groups, gpu_ids, timeout_s=60)).gpu() == {}  # no nvidia-ml-py or driver
        finally:
            placement.release_groups(groups)
