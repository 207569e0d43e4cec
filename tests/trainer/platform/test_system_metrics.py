"""trainer/platform/system_metrics.py: the process's CPU and memory from psutil (real), and the GPU keys
from NVML. This machine has no GPU, so the NVML path runs against a stand-in ``pynvml`` module
(the one part that cannot run here); the real nvidia-ml-py without a driver must simply omit
the GPU keys. Which GPUs are read: the run's own, mapped from Ray's / CUDA's ids to NVML's
devices (the read on every node of a run over Ray: tests/trainer/platform/test_placement.py)."""

from __future__ import annotations

import logging
import sys
from types import SimpleNamespace

import psutil
import pytest
import torch

from trainer.platform import system_metrics as sm
from trainer.platform.system_metrics import (CPU_PERCENT, GPU_COUNT, GPU_MEM_FRAC, GPU_MEM_FRAC_MAX, GPU_MEM_MB, GPU_UTIL,
                                             GPU_UTIL_MIN, RSS_MB, NvmlGpus, SystemMonitor)

GIB = 1 << 30


def fake_nvml(devices: list[tuple[int, int]], names: list[str] | None = None) -> SimpleNamespace:
    """A stand-in pynvml: device i is ``devices[i]`` = (utilisation %, bytes used) of 8 GiB, its UUID
    ``GPU-iiii-...``; ``read`` lists the devices whose utilisation or memory was asked for."""
    read: list[int] = []

    def util(h):
        read.append(h)
        return SimpleNamespace(gpu=devices[h][0])

    return SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: len(devices), nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}{h}{h}{h}-5eed-4bad-a11e-00000000000{h}".encode(),  # bytes, as older ones
        nvmlDeviceGetName=lambda h: (names or ["NVIDIA H100 80GB HBM3"] * len(devices))[h],
        nvmlDeviceGetUtilizationRates=util,
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=devices[h][1], total=8 * GIB), read=read)


EIGHT = [(10 * i, i * GIB) for i in range(8)]  # GPU i: 10*i % busy, i GiB used


def test_cpu_and_rss_of_this_process():
    mon = SystemMonitor()
    sum(i * i for i in range(2_000_000))  # some CPU time between the samples
    m = mon.sample()
    assert abs(m[RSS_MB] - psutil.Process().memory_info().rss / 2**20) < 50 and m[RSS_MB] > 10
    assert m[CPU_PERCENT] > 0


def test_no_gpu_means_no_gpu_keys():
    m = SystemMonitor().sample()  # nvidia-ml-py may be installed; there is no driver or device here
    assert not any(k.startswith("system/gpu") for k in m)
    assert sm.RunGpus([], []).per_node == [] and SystemMonitor(gpus=NvmlGpus(["0"])).gpu() == {}


def test_gpu_keys_from_nvml(monkeypatch):
    """A process that sees every GPU (CUDA_VISIBLE_DEVICES unset): two devices, 30% and 50% busy,
    1 GiB and 3 GiB of 8 GiB each used."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake = fake_nvml([(30, 1 * GIB), (50, 3 * GIB)])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    m = SystemMonitor().sample()
    assert m[GPU_UTIL] == 40.0 and m[GPU_MEM_MB] == 4096.0 and m[GPU_MEM_FRAC] == 0.25
    assert m[GPU_COUNT] == 2 and m[GPU_UTIL_MIN] == 30.0 and m[GPU_MEM_FRAC_MAX] == 3 / 8

    def gone(h):
        raise RuntimeError("GPU lost")

    fake.nvmlDeviceGetUtilizationRates = gone  # a query failing mid-run omits the keys, never fails the step
    mon = SystemMonitor()
    assert GPU_UTIL not in mon.sample() and RSS_MB in mon.sample()


def test_a_run_holding_gpus_3_and_5_of_eight_reads_only_those():
    fake = fake_nvml(EIGHT)
    m = SystemMonitor(gpus=NvmlGpus(["3", "5"], nvml=fake)).sample()
    assert set(fake.read) == {3, 5}  # the other six GPUs (other runs') are never read
    assert m[GPU_COUNT] == 2 and m[GPU_UTIL] == 40.0 and m[GPU_UTIL_MIN] == 30.0
    assert m[GPU_MEM_MB] == 8 * 1024 and m[GPU_MEM_FRAC] == 8 / 16 and m[GPU_MEM_FRAC_MAX] == 5 / 8


def test_a_process_seeing_gpus_by_uuid_reads_those(monkeypatch):
    """CUDA_VISIBLE_DEVICES of UUIDs (a node started with them gives Ray, and so its tasks, UUIDs),
    in an order of their own, one of them a prefix as CUDA accepts."""
    fake = fake_nvml(EIGHT)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-6666-5eed-4bad-a11e-000000000006,GPU-1111")
    m = SystemMonitor().sample()
    assert set(fake.read) == {1, 6} and m[GPU_COUNT] == 2 and m[GPU_UTIL] == 35.0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a process given no GPU reads none
    assert SystemMonitor().gpu() == {}


@pytest.mark.parametrize("ids,found", [
    (["3", "5"], [3, 5]),
    (["5", "3"], [5, 3]),
    (["GPU-2222-5eed-4bad-a11e-000000000002", "GPU-7777"], [2, 7]),  # a UUID, a unique prefix of one
    (["GPU-"], [None]),  # a prefix of every UUID names none
    (["8", "GPU-9999", "MIG-1111-aaaa", ""], [None, None, None, None]),  # past the node's 8, unknown, MIG
])
def test_nvml_indices(ids, found):
    uuids = [f"GPU-{h}{h}{h}{h}-5eed-4bad-a11e-00000000000{h}" for h in range(8)]
    assert sm.nvml_indices(ids, uuids) == found


def test_a_gpu_not_on_the_node_is_left_out_saying_so(caplog):
    fake = fake_nvml(EIGHT[:2])
    with caplog.at_level(logging.WARNING, logger=sm.__name__):
        assert NvmlGpus(["1", "4"], nvml=fake).read() == [(10.0, GIB, 8 * GIB)]
    assert "GPU(s) 4 are not among this node's 2 NVML devices" in caplog.text


@pytest.mark.parametrize("order,warns", [(None, True), ("PCI_BUS_ID", False)])
def test_integer_ids_on_a_node_of_mixed_models_warn_unless_cuda_counts_by_bus(order, warns, monkeypatch, caplog):
    if order is None:
        monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    else:
        monkeypatch.setenv("CUDA_DEVICE_ORDER", order)
    fake = fake_nvml(EIGHT[:2], names=["NVIDIA A100-SXM4-40GB", "NVIDIA T4"])
    with caplog.at_level(logging.WARNING, logger=sm.__name__):
        assert len(NvmlGpus(["1"], nvml=fake).read()) == 1
        NvmlGpus(["GPU-0000"], nvml=fake).read()  # a UUID is exact whatever the order
    assert ("mixes GPU models" in caplog.text) is warns


@pytest.mark.parametrize("indices,visible,ids", [([0], None, ["0"]), ([1], "3,5", ["5"]), ([2], "3,5", []),
                                                 ([0, 1], "GPU-aa,GPU-bb", ["GPU-aa", "GPU-bb"])])
def test_node_gpu_ids_is_local_cuda_index_inverted(indices, visible, ids):
    assert sm.node_gpu_ids(indices, visible) == ids
    from trainer.platform.placement import local_cuda_index

    assert [local_cuda_index(i, visible or "") for i in ids] == [i for i in indices if ids]


def test_the_embedded_loops_gpu_is_the_device_it_trains_on(monkeypatch):
    """cuda:1 of a worker given GPUs 3,5 is the node's GPU 5 (torch has no CUDA here, so no UUID:
    the mapping goes through CUDA_VISIBLE_DEVICES); a run on the CPU reads no GPU."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert sm.cuda_uuid(1) is None
    assert sm.device_gpus(torch.device("cuda", 1)).ids == ["5"]
    assert sm.device_gpus(torch.device("cpu")).ids == []
    fake = fake_nvml(EIGHT)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert SystemMonitor(gpus=sm.device_gpus(torch.device("cpu"))).gpu() == {} and fake.read == []


def test_gpu_metrics_of_nothing_is_nothing():
    assert sm.gpu_metrics([]) == {}
    assert sm.gpu_metrics([(0.0, 0, 0)])[GPU_MEM_FRAC] == 0.0  # a device reporting no memory does not divide by 0


def test_a_node_that_does_not_answer_in_time_is_left_out_and_not_asked_again(monkeypatch):
    """RunGpus's step read against a stand-in Ray (the real one: tests/trainer/platform/test_placement.py):
    three nodes, one slow and one whose reader died; the slow one's question stays pending."""
    asked: list[int] = []
    answering = {0}

    class Reader:
        def __init__(self, i):
            self.read = SimpleNamespace(remote=lambda: asked.append(i) or ("ref", i, len(asked)))

    def get(ref):
        if ref[1] == 2:
            raise RuntimeError("ActorDiedError")
        return [(10.0 * (ref[1] + 1), GIB, 8 * GIB)]

    def wait(refs, num_returns, timeout):
        assert timeout == 5.0 and num_returns == len(refs)
        return [r for r in refs if r[1] in answering], []

    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(wait=wait, get=get))
    gpus = sm.RunGpus([object()] * 3, [["0"], ["1"], ["2"]])
    gpus.readers = [Reader(i) for i in range(3)]
    answering.add(2)
    assert SystemMonitor(gpus=gpus).gpu()[GPU_COUNT] == 1 and gpus.per_node == [[(10.0, GIB, 8 * GIB)], None, None]
    assert sorted(asked) == [0, 1, 2]
    answering.add(1)
    assert gpus.read() == [(10.0, GIB, 8 * GIB), (20.0, GIB, 8 * GIB)]
    assert sorted(asked) == [0, 0, 1, 2, 2]  # node 1's first question was still open: not asked twice
    assert sm.RunGpus([], []).read() == [] and gpus.pending == {}
