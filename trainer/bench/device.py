"""What `aero bench` measures of the device: each method's peak memory and its update's MFU.

Peak memory of one method in a round-robin bench. Every benched method's model and optimizer
stay resident between its steps, so the device's peak during a step counts the other methods'
state too. Around each of its steps a method's :class:`MethodMemory` resets the device's peak
and notes what was in use at the start; its first step (which also builds its model) gives its
own resident state (in use after minus before). It reports

* ``peak_memory_mb``: what a run of this method ALONE peaks at: its resident state plus the most
  any of its steps allocated on top of what was in use when the step began;
* ``peak_memory_device_mb``: the device-wide peak during its steps, every benched method resident.

On CUDA these are ``torch.cuda.max_memory_allocated`` (tensors, not the caching allocator's
reserve). On a CPU they are the process's resident set: the peak is Linux's VmHWM, reset before
each step through /proc/self/clear_refs; they leave out the interpreter's and libraries' own
baseline (in use before the method's first step), and memory freed to the allocator may stay
resident, so CPU figures are approximate. ``None`` where the platform reports neither.

MFU of the update: training FLOPs per step (trainer/core/flops.py, the paper's 6N-per-token
convention plus attention) over train seconds per step, over the device's peak dense bf16
FLOP/s (:data:`PEAK_BF16_FLOPS`, matched on the CUDA device name; ``AERO_PEAK_FLOPS`` overrides
it). ``None`` on a CPU unless ``AERO_PEAK_FLOPS`` is set.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

MB = 1024.0 * 1024.0
# Dense bf16 tensor-core peaks from the vendors' spec sheets (no sparsity), FLOP/s; the first
# name that is a substring of torch.cuda.get_device_name() wins.
PEAK_BF16_FLOPS: dict[str, float] = {"H200": 989e12, "H100": 989e12, "A100": 312e12}
PEAK_FLOPS_ENV = "AERO_PEAK_FLOPS"


def peak_flops(device: torch.device) -> float | None:
    """The device's peak dense bf16 FLOP/s: ``AERO_PEAK_FLOPS`` when set, else the table's entry
    for the CUDA device's name, else None (a CPU, or a GPU the table does not know)."""
    if os.environ.get(PEAK_FLOPS_ENV):
        return float(os.environ[PEAK_FLOPS_ENV])
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((flops for key, flops in PEAK_BF16_FLOPS.items() if key in name), None)


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


class Meter:
    """Memory in use and its peak since the last reset, in bytes (module docstring)."""

    def __init__(self, device: torch.device):
        self.device = device

    def in_use(self) -> float | None:
        if self.device.type == "cuda":
            return float(torch.cuda.memory_allocated(self.device))
        return _status_kb("VmRSS")

    def reset(self) -> bool:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            return True
        try:
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS (Linux >= 4.0)
            return True
        except OSError:
            return False

    def peak(self) -> float | None:
        if self.device.type == "cuda":
            return float(torch.cuda.max_memory_allocated(self.device))
        return _status_kb("VmHWM")


def _status_kb(field: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1]) * 1024.0
    except OSError:
        pass
    return None


class MethodMemory:
    """One method's memory over its steps in a round-robin bench: ``begin()`` before each step,
    ``end()`` after it (module docstring)."""

    def __init__(self, device: torch.device):
        self.meter = Meter(device)
        self.steps = 0
        self.resident: float | None = None  # its model, gradients and optimizer state, from its first step
        self.alone: float | None = None
        self.device_peak: float | None = None
        self._start: float | None = None
        self._ok = False

    def begin(self) -> None:
        self._start = self.meter.in_use()
        self._ok = self.meter.reset() and self._start is not None

    def end(self) -> None:
        peak, now, first = self.meter.peak(), self.meter.in_use(), self.steps == 0
        self.steps += 1
        if not self._ok or peak is None or now is None:
            return
        start = self._start
        if first:  # the first call builds the model: everything it added and kept is this method's
            self.resident, alone = max(0.0, now - start), peak - start
        else:
            alone = (self.resident or 0.0) + peak - start
        self.alone = max(self.alone or 0.0, alone)
        self.device_peak = max(self.device_peak or 0.0, peak)

    def summary(self) -> dict[str, float | None]:
        mb = (lambda b: None if b is None else b / MB)  # noqa: E731
        return {"peak_memory_mb": mb(self.alone), "peak_memory_device_mb": mb(self.device_peak),
                "resident_memory_mb": mb(self.resident)}
