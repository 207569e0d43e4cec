"""Checkpoints for exact resume: model, optimizer, LR schedule, every RNG, data position, step,
and a method's own state across steps (aero-mem's prompt memory, as plain data).

Layout: OUT/checkpoints/step_000020/state.pt and OUT/checkpoints/latest (a text file naming the
newest complete directory, written last, so a crash mid-save never points at a partial one).
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch


def _dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / "checkpoints"


def save_checkpoint(out_dir: str | Path, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``state`` (tensors, state dicts, plain values) for ``step`` and point ``latest`` at it."""
    root = _dir(out_dir)
    path = root / f"step_{step:06d}"
    path.mkdir(parents=True, exist_ok=True)
    full = {**state, "step": step, "py_random": random.getstate(), "torch_cpu_rng": torch.get_rng_state()}
    tmp = path / "state.pt.tmp"
    torch.save(full, tmp)
    os.replace(tmp, path / "state.pt")
    latest_tmp = root / "latest.tmp"
    latest_tmp.write_text(path.name)
    os.replace(latest_tmp, root / "latest")
    for old in sorted(p for p in root.glob("step_*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def load_latest_checkpoint(out_dir: str | Path) -> dict[str, Any] | None:
    """The newest complete checkpoint's state, or None. Restores the global Python/torch RNGs."""
    latest = _dir(out_dir) / "latest"
    if not latest.exists():
        return None
    state = torch.load(_dir(out_dir) / latest.read_text().strip() / "state.pt", weights_only=False)
    random.setstate(state["py_random"])
    torch.set_rng_state(state["torch_cpu_rng"])
    return state


def numpy_rng_state(rng: np.random.Generator) -> dict:
    return rng.bit_generator.state


def numpy_rng_from_state(state: dict) -> np.random.Generator:
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return rng
