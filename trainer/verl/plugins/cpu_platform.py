"""A verl platform for the CPU (verl 0.9.1's ``PlatformBase``): gloo, ``torch.device("cpu")``
and a device module whose cache, memory and synchronisation calls do nothing.

verl 0.9.1 ships nvidia, huawei and amd platforms and falls back to nvidia (cuda + nccl) when
none is found. With ``VERL_PLATFORM=cpu`` it picks this one instead, so:

* ``get_device_name()`` is "cpu": ``trainer.device=cpu`` is kept (verl only overrides it for an
  accelerator), tensors and FSDP2 shards live on the CPU, ``init_device_mesh("cpu", ...)``;
* ``get_nccl_backend()`` is "gloo";
* ``get_device_id()`` is ``torch.device("cpu")``, not an integer: verl moves tensors with
  ``.to(get_device_id())`` and builds ``torch.device(get_device_id())``, and ``torch.device(0)``
  raises on a CPU-only build;
* the Ray resource stays "GPU": Ray schedules verl's workers by GPU bundles, so the launcher
  starts Ray with logical GPUs (``ray.init(num_gpus=N)``) that only count workers, no device;
* no IPC (no CUDA IPC handles), no profiler ranges.

It is never auto-detected (``is_platform_available`` is False): a CPU run is an explicit choice.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any

import torch


def _noop(*_: Any, **__: Any) -> None:
    return None


def _zero(*_: Any, **__: Any) -> int:
    return 0


def cpu_device_module() -> types.ModuleType:
    """``torch.cpu`` plus the CUDA-module calls verl makes through ``get_torch_device()``
    (empty_cache, memory queries, RNG state, ipc_collect...) as no-ops or zeros."""
    mod = types.ModuleType("aero_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("_"):
            setattr(mod, name, getattr(torch.cpu, name))
    for name in ("empty_cache", "ipc_collect", "reset_peak_memory_stats", "set_per_process_memory_fraction",
                 "manual_seed", "manual_seed_all", "set_rng_state"):
        setattr(mod, name, _noop)
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(mod, name, _zero)
    mod.synchronize = _noop
    mod.set_device = _noop
    mod.current_device = lambda: "cpu"
    mod.device_count = lambda: 1
    mod.is_available = lambda: True
    mod.mem_get_info = lambda *_, **__: (0, 0)
    mod.get_rng_state = lambda *_, **__: torch.get_rng_state()
    mod.get_device_name = lambda *_, **__: "cpu"
    return mod


def register_platform() -> None:
    from verl.plugin.platform import PlatformBase, PlatformRegistry

    if PlatformRegistry.get("cpu") is not None and getattr(PlatformRegistry.get("cpu"), "AERO_LAB", False):
        return

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):
        """verl on the CPU (module docstring)."""

        AERO_LAB = True
        _module = cpu_device_module()

        device_name = property(lambda self: "cpu")
        vendor_name = property(lambda self: "cpu")
        device_module = property(lambda self: self._module)

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return False  # only VERL_PLATFORM=cpu selects it

        def current_device(self):  # type: ignore[override]
            return torch.device("cpu")

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0):
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"  # Ray's logical GPU ids land there; the CPU build ignores it

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {"num_gpus": num_gpus}

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        @contextlib.contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def cudart(self) -> Any:
            return None
