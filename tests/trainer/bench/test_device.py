"""A benched method's peak memory with the others resident (trainer/bench/device.py), on a
scripted meter: what one run of the method alone would peak at, and the device-wide peak."""

from __future__ import annotations

import torch

from trainer.bench.device import MB, MethodMemory, peak_flops


class ScriptedMeter:
    """In-use bytes before and after each step, and the step's peak, as a device would report."""

    def __init__(self, steps):
        self.steps, self.i, self.phase = steps, 0, "before"

    def in_use(self):
        before, peak, after = self.steps[self.i]
        if self.phase == "before":
            self.phase = "after"
            return before
        self.phase, self.i = "before", self.i + 1
        return after

    def reset(self):
        return True

    def peak(self):
        return self.steps[self.i][1]


def test_alone_is_own_resident_state_plus_the_steps_growth():
    mem = MethodMemory(torch.device("cpu"))
    # (in use before, peak during, in use after), in MB. Another method holds 1000 MB throughout;
    # this method's first step builds 300 MB of state; its second step starts after a third
    # method added 500 MB and grows 250 MB on top.
    steps = [(1000, 1000 + 300 + 120, 1300), (1800, 1800 + 250, 1800)]
    mem.meter = ScriptedMeter([tuple(x * MB for x in s) for s in steps])
    for _ in steps:
        mem.begin()
        mem.end()
    out = mem.summary()
    assert out["resident_memory_mb"] == 300
    assert out["peak_memory_mb"] == 300 + 250  # max(first: 300 + 120, later: 300 + 250)
    assert out["peak_memory_device_mb"] == 2050


def test_unreadable_memory_is_none(monkeypatch):
    mem = MethodMemory(torch.device("cpu"))
    monkeypatch.setattr(mem.meter, "reset", lambda: False)  # e.g. no /proc/self/clear_refs
    mem.begin()
    mem.end()
    assert mem.summary() == {"peak_memory_mb": None, "peak_memory_device_mb": None, "resident_memory_mb": None}


def test_peak_flops_table_and_override(monkeypatch):
    monkeypatch.delenv("AERO_PEAK_FLOPS", raising=False)
    assert peak_flops(torch.device("cpu")) is None
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    assert peak_flops(torch.device("cuda")) == 989e12
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    assert peak_flops(torch.device("cuda")) == 312e12
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA L4")
    assert peak_flops(torch.device("cuda")) is None
    monkeypatch.setenv("AERO_PEAK_FLOPS", "121e12")
    assert peak_flops(torch.device("cuda")) == 121e12
