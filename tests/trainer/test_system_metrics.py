"""trainer/system_metrics.py: the process's CPU and memory from psutil (real), and the GPU keys
from NVML. This machine has no GPU, so the NVML path runs against a stand-in ``pynvml`` module
(the one part that cannot run here); the real nvidia-ml-py without a driver must simply omit
the GPU keys."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import psutil

from trainer.system_metrics import CPU_PERCENT, GPU_MEM_FRAC, GPU_MEM_MB, GPU_UTIL, RSS_MB, SystemMonitor


def test_cpu_and_rss_of_this_process():
    mon = SystemMonitor()
    sum(i * i for i in range(2_000_000))  # some CPU time between the samples
    m = mon.sample()
    assert abs(m[RSS_MB] - psutil.Process().memory_info().rss / 2**20) < 50 and m[RSS_MB] > 10
    assert m[CPU_PERCENT] > 0


def test_no_gpu_means_no_gpu_keys():
    m = SystemMonitor().sample()  # nvidia-ml-py may be installed; there is no driver or device here
    assert not any(k.startswith("system/gpu") for k in m)


def test_gpu_keys_from_nvml(monkeypatch):
    """A stand-in pynvml with two devices: 30% and 50% busy, 1 GiB and 3 GiB of 8 GiB each used."""
    devices = [(30, 1 << 30), (50, 3 << 30)]
    fake = SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: len(devices), nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=devices[h][0]),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=devices[h][1], total=8 << 30))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    m = SystemMonitor().sample()
    assert m[GPU_UTIL] == 40.0 and m[GPU_MEM_MB] == 4096.0 and m[GPU_MEM_FRAC] == 0.25

    def gone(h):
        raise RuntimeError("GPU lost")

    fake.nvmlDeviceGetUtilizationRates = gone  # a query failing mid-run omits the keys, never fails the step
    mon = SystemMonitor()
    assert GPU_UTIL not in mon.sample() and RSS_MB in mon.sample()
