"""System metrics per step (system/*, docs/metrics.md): the training process's CPU and memory
(psutil) and, where an NVIDIA GPU and its driver are present, GPU utilisation and memory
through NVML (nvidia-ml-py, the optional extra ``gpu``; imported on first use). A machine
without a GPU, the driver or the package simply logs no system/gpu_* keys.

CPU percent is psutil's: the process's CPU time since the previous sample over the wall time
between them, in percent of one core (so up to 100 x cores), i.e. averaged over the step.

The GPU keys cover the run's own GPUs, never the node's others (another run's):

* the embedded engine: the CUDA device its loop trains on (:func:`device_gpus`);
* verl: the GPUs of the run's placement groups on every node it holds, each node's read there
  by a small actor in that node's group (:class:`RunGpus`), wherever the trainer actor runs;
* ``SystemMonitor()`` alone: the GPUs this process sees (``CUDA_VISIBLE_DEVICES``; every GPU of
  the node when it is unset).

NVML sees every GPU of the node whatever ``CUDA_VISIBLE_DEVICES`` says, and numbers them its own
way: a GPU id is mapped to NVML's index by :func:`nvml_indices`.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
from typing import Any, Callable, Sequence

import psutil

log = logging.getLogger(__name__)

CPU_PERCENT, HOST_CPU_PERCENT, RSS_MB = "system/cpu_percent", "system/host_cpu_percent", "system/rss_mb"
GPU_UTIL, GPU_MEM_MB, GPU_MEM_FRAC = "system/gpu_util_percent", "system/gpu_mem_used_mb", "system/gpu_mem_frac"
GPU_COUNT = "system/gpu_count"  # how many of the run's GPUs this step's GPU keys cover
GPU_UTIL_MIN = "system/gpu_util_min_percent"  # the least busy of them: an idle or waiting rank
GPU_MEM_FRAC_MAX = "system/gpu_mem_max_frac"  # the fullest of them: the headroom before an OOM

Reading = tuple[float, int, int]  # one GPU: (utilisation in %, memory used, memory total; bytes)
READ_TIMEOUT_S = 5.0  # how long a step waits for the run's other nodes to report their GPUs


def gpu_metrics(readings: Sequence[Reading]) -> dict[str, float]:
    """The GPU keys over ``readings`` (every GPU of the run, on every node): mean and least
    utilisation, memory used summed, its fraction of the total, the fullest GPU's fraction."""
    if not readings:
        return {}
    util = [float(u) for u, _, _ in readings]
    used, total = sum(r[1] for r in readings), sum(r[2] for r in readings)
    return {GPU_UTIL: sum(util) / len(util), GPU_MEM_MB: used / 2**20, GPU_MEM_FRAC: used / total if total else 0.0,
            GPU_COUNT: float(len(readings)), GPU_UTIL_MIN: min(util),
            GPU_MEM_FRAC_MAX: max(u / t if t else 0.0 for _, u, t in readings)}


# ---------------------------------------------------------------- which NVML devices are the run's


def visible_ids(visible: str | None) -> list[str] | None:
    """The GPU ids a ``CUDA_VISIBLE_DEVICES`` value lists; None when it is unset (every GPU)."""
    if visible is None:
        return None
    return [] if visible.strip() == "NoDevFiles" else [v.strip() for v in visible.split(",") if v.strip()]


def nvml_indices(ids: Sequence[str], uuids: Sequence[str]) -> list[int | None]:
    """NVML's index of each GPU of ``ids`` on a node whose devices have ``uuids`` (by NVML index),
    or None where no device of the node is that GPU.

    An id is what Ray hands out and ``CUDA_VISIBLE_DEVICES`` lists: the node's own ids (Ray's ids
    are the entries of its node's ``CUDA_VISIBLE_DEVICES``, or 0..n-1). A UUID (``GPU-...``, or a
    unique prefix of one, as CUDA accepts) is exact. An integer is a CUDA index, and CUDA numbers
    GPUs fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, while NVML numbers them in PCI bus
    order: an integer is taken as NVML's index, which is exact under ``PCI_BUS_ID`` and, in
    practice, on a node of one GPU model (every GPU ties, and ties stay in bus order). On a node
    of mixed models, give the GPUs by UUID or set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (NvmlGpus
    warns). MIG instances (``MIG-...``) are not read."""
    out: list[int | None] = []
    for gpu in ids:
        gpu = gpu.strip()
        if gpu.isdigit():
            out.append(int(gpu) if int(gpu) < len(uuids) else None)
        elif gpu.startswith("GPU-"):
            exact = [i for i, u in enumerate(uuids) if u == gpu]
            prefixed = [i for i, u in enumerate(uuids) if u.startswith(gpu)]
            out.append(exact[0] if exact else prefixed[0] if len(prefixed) == 1 else None)
        else:
            out.append(None)
    return out


def node_gpu_ids(indices: Sequence[int], visible: str | None) -> list[str]:
    """The node's ids of this process's CUDA devices ``indices`` under ``CUDA_VISIBLE_DEVICES=visible``
    (the inverse of trainer.platform.placement.local_cuda_index)."""
    ids = visible_ids(visible)
    return [str(i) if ids is None else ids[i] for i in indices if ids is None or 0 <= i < len(ids)]


def cuda_uuid(index: int) -> str | None:
    """The UUID (``GPU-...``) of this process's CUDA device ``index`` as torch reports it, or None
    when torch has not initialised CUDA here (it is never initialised for this) or cannot say."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None
        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except Exception:  # noqa: BLE001 - a torch without the field, a device gone: map by index
        return None
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def nvml_text(value: Any) -> str:
    """A string NVML returned (older nvidia-ml-py returns bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlGpus:
    """The node's GPUs ``ids`` read through NVML, once per call: one :data:`Reading` each. ``ids``
    are node ids (Ray's GPU ids, ``CUDA_VISIBLE_DEVICES`` entries; :func:`nvml_indices`); None
    reads every GPU of the node, [] none. Devices are looked up on the first read; without
    nvidia-ml-py, a driver or a device, nothing is read.

    ``nvml``: a stand-in for the ``pynvml`` module (a test hook); None imports nvidia-ml-py."""

    def __init__(self, ids: Sequence[str] | None, nvml: Any = None):
        self.ids = None if ids is None else [str(i) for i in ids]
        self.nvml = nvml
        self._handles: list[Any] | None = None

    def handles(self) -> list[Any]:
        if self._handles is None:
            self._handles = []
            if self.ids == []:
                return []
            try:
                nv = self.nvml or importlib.import_module("pynvml")  # nvidia-ml-py
                nv.nvmlInit()
                self.nvml = nv
                every = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
                self._handles = every if self.ids is None else self._select(nv, every)
            except Exception as e:  # noqa: BLE001 - no package, no driver, no device: omit the GPU keys
                log.debug("no GPU metrics: %s", e)
        return self._handles

    def _select(self, nv: Any, every: list[Any]) -> list[Any]:
        found = nvml_indices(self.ids or [], [nvml_text(nv.nvmlDeviceGetUUID(h)) for h in every])
        if None in found:
            missing = [g for g, i in zip(self.ids or [], found) if i is None]
            log.warning("GPU metrics: GPU(s) %s are not among this node's %d NVML devices; their metrics are left "
                        "out", ", ".join(missing), len(every))
        if any(g.isdigit() for g in self.ids or []) and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
            names: set[str] = set()
            with contextlib.suppress(Exception):  # a model name NVML cannot give is only a missed warning
                names = {nvml_text(nv.nvmlDeviceGetName(h)) for h in every}
            if len(names) > 1:
                log.warning("GPU metrics: this node mixes GPU models (%s) and CUDA numbers them fastest first, NVML by "
                            "PCI bus: integer GPU ids may name other GPUs here. Set CUDA_DEVICE_ORDER=PCI_BUS_ID on the "
                            "node, or give its GPUs by UUID", ", ".join(sorted(names)))
        return [every[i] for i in found if i is not None]

    def read(self) -> list[Reading]:
        out = []
        for h in self.handles():
            mem = self.nvml.nvmlDeviceGetMemoryInfo(h)
            out.append((float(self.nvml.nvmlDeviceGetUtilizationRates(h).gpu), int(mem.used), int(mem.total)))
        return out

    __call__ = read


def device_gpus(device: Any) -> NvmlGpus:
    """The GPU of the embedded loop, which trains in this process on ``device`` (a torch device;
    a bare "cuda" is the current device, the one placement chose): by its UUID when torch gives
    one, else by the node id ``CUDA_VISIBLE_DEVICES`` maps it to. None on the CPU."""
    if getattr(device, "type", str(device)) != "cuda":
        return NvmlGpus([])
    import torch

    index = device.index if getattr(device, "index", None) is not None else torch.cuda.current_device()
    uuid = cuda_uuid(index)
    return NvmlGpus([uuid] if uuid else node_gpu_ids([index], os.environ.get("CUDA_VISIBLE_DEVICES")))


# ---------------------------------------------------------------- every node of a run (verl)


class NodeGpuReader:
    """A Ray actor on one node of a run, holding no resources: reads the run's GPUs there."""

    def __init__(self, ids: Sequence[str], nvml: Any = None):
        self.gpus = NvmlGpus(ids, nvml)

    def read(self) -> list[Reading]:
        try:
            return self.gpus.read()
        except Exception as e:  # noqa: BLE001 - a GPU query that fails (reset, unsupported): no readings
            log.debug("GPU metrics failed: %s", e)
            return []


class RunGpus:
    """The GPUs a run holds on each of its nodes (``groups``: its placement groups, one per node;
    ``gpu_ids``: Ray's GPU ids in each, trainer.platform.placement.describe_groups), read by one
    :class:`NodeGpuReader` per node: an actor of no resources in bundle 0 of the node's group,
    started by :meth:`start` (or the first read) and gone with the actor that made it.

    One read per call, at most once a step: every node is asked, and the call waits up to
    ``timeout_s`` for the answers. A node that has not answered is left out of this step (then
    ``gpu_count`` is smaller), keeps its question pending and is not asked again until it answers.
    ``per_node`` holds the last call's readings per node (None: no answer).

    ``nvml``: a stand-in for the ``pynvml`` module, shipped to every node's reader (a test hook);
    None: each reader imports nvidia-ml-py on its own node."""

    def __init__(self, groups: list, gpu_ids: list[list[str]], nvml: Any = None, timeout_s: float = READ_TIMEOUT_S):
        if len(groups) != len(gpu_ids):
            raise ValueError(f"{len(groups)} placement groups but GPU ids for {len(gpu_ids)}")
        self.groups, self.gpu_ids, self.nvml, self.timeout_s = groups, gpu_ids, nvml, timeout_s
        self.readers: list[Any] | None = None
        self.pending: dict[int, Any] = {}
        self.per_node: list[list[Reading] | None] = [None] * len(groups)

    def start(self) -> None:
        if self.readers is not None or not self.groups:
            self.readers = self.readers or []
            return
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        reader = ray.remote(num_cpus=0, num_gpus=0)(NodeGpuReader)
        self.readers = [reader.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            g, placement_group_bundle_index=0)).remote(ids, self.nvml) for g, ids in zip(self.groups, self.gpu_ids)]

    def read(self) -> list[Reading]:
        import ray

        self.start()
        for i, reader in enumerate(self.readers or []):
            if i not in self.pending:
                self.pending[i] = reader.read.remote()
        refs = list(self.pending.values())
        if not refs:
            return []
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=self.timeout_s)[0])
        self.per_node = [None] * len(self.groups)
        for i, ref in list(self.pending.items()):
            if ref in ready:
                del self.pending[i]
                try:
                    self.per_node[i] = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - a reader lost with its node: that node is left out
                    log.debug("GPU metrics of node %d failed: %s", i, e)
        return [r for node in self.per_node if node for r in node]

    __call__ = read


# ---------------------------------------------------------------- per step


class SystemMonitor:
    """Samples the current process (and the host's CPU) and the run's GPUs; ``sample()`` once per
    step. ``gpus`` reads the run's GPUs (:class:`NvmlGpus`, :class:`RunGpus`, :func:`device_gpus`);
    None: the GPUs this process sees (module docstring)."""

    def __init__(self, pid: int | None = None, gpus: Callable[[], Sequence[Reading]] | None = None):
        self.proc = psutil.Process(pid)
        self.proc.cpu_percent(None)  # the first call only starts the interval
        psutil.cpu_percent(None)
        self.gpus = gpus if gpus is not None else NvmlGpus(visible_ids(os.environ.get("CUDA_VISIBLE_DEVICES")))

    def gpu(self) -> dict[str, float]:
        """The GPU keys over the run's GPUs (:func:`gpu_metrics`); {} when none was read."""
        return gpu_metrics(self.gpus())

    def sample(self) -> dict[str, float]:
        with self.proc.oneshot():
            out = {CPU_PERCENT: float(self.proc.cpu_percent(None)), RSS_MB: self.proc.memory_info().rss / 2**20}
        out[HOST_CPU_PERCENT] = float(psutil.cpu_percent(None))
        try:
            out.update(self.gpu())
        except Exception as e:  # noqa: BLE001 - a GPU query that fails (reset, unsupported) omits the GPU keys
            log.debug("GPU metrics failed: %s", e)
        return out
