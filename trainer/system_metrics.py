"""System metrics per step (system/*, docs/metrics.md): the training process's CPU and memory
(psutil) and, where an NVIDIA GPU and its driver are present, GPU utilisation and memory
through NVML (nvidia-ml-py, the optional extra ``gpu``; imported on first use). A machine
without a GPU, the driver or the package simply logs no system/gpu_* keys.

CPU percent is psutil's: the process's CPU time since the previous sample over the wall time
between them, in percent of one core (so up to 100 x cores), i.e. averaged over the step.
"""

from __future__ import annotations

import logging
from typing import Any

import psutil

log = logging.getLogger(__name__)

CPU_PERCENT, HOST_CPU_PERCENT, RSS_MB = "system/cpu_percent", "system/host_cpu_percent", "system/rss_mb"
GPU_UTIL, GPU_MEM_MB, GPU_MEM_FRAC = "system/gpu_util_percent", "system/gpu_mem_used_mb", "system/gpu_mem_frac"


class SystemMonitor:
    """Samples the current process (and the host's CPU); ``sample()`` once per step."""

    def __init__(self, pid: int | None = None):
        self.proc = psutil.Process(pid)
        self.proc.cpu_percent(None)  # the first call only starts the interval
        psutil.cpu_percent(None)
        self._gpus: list[Any] | None = None
        self._nvml: Any = None

    def _gpu_handles(self) -> list[Any]:
        """NVML device handles, looked up once; [] without NVML, a driver or a GPU."""
        if self._gpus is None:
            self._gpus = []
            try:
                import pynvml  # nvidia-ml-py

                pynvml.nvmlInit()
                self._nvml = pynvml
                self._gpus = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            except Exception as e:  # noqa: BLE001 - no package, no driver, no device: omit the GPU keys
                log.debug("no GPU metrics: %s", e)
        return self._gpus

    def gpu(self) -> dict[str, float]:
        """Mean utilisation over the visible GPUs, total memory used and its fraction."""
        handles = self._gpu_handles()
        if not handles:
            return {}
        nv = self._nvml
        util = [nv.nvmlDeviceGetUtilizationRates(h).gpu for h in handles]
        mem = [nv.nvmlDeviceGetMemoryInfo(h) for h in handles]
        used, total = sum(m.used for m in mem), sum(m.total for m in mem)
        return {GPU_UTIL: float(sum(util) / len(util)), GPU_MEM_MB: used / 2**20, GPU_MEM_FRAC: used / total if total else 0.0}

    def sample(self) -> dict[str, float]:
        with self.proc.oneshot():
            out = {CPU_PERCENT: float(self.proc.cpu_percent(None)), RSS_MB: self.proc.memory_info().rss / 2**20}
        out[HOST_CPU_PERCENT] = float(psutil.cpu_percent(None))
        try:
            out.update(self.gpu())
        except Exception as e:  # noqa: BLE001 - a GPU query that fails (reset, unsupported) omits the GPU keys
            log.debug("GPU metrics failed: %s", e)
        return out
