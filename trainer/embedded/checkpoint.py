"""Checkpoints for exact resume: model, optimizer, LR schedule, every RNG, data position, step,
and a method's own state across steps (aero-mem's prompt memory, as plain data).

:class:`TrainingState` is everything a run carries from one step to the next; it owns the
checkpoint format (:meth:`TrainingState.state_dict`, :meth:`TrainingState.load_state_dict`) and
resuming (:meth:`TrainingState.resume`).

Layout: OUT/checkpoints/step_000020/state.pt and OUT/checkpoints/latest (a text file naming the
newest complete directory, written last, so a crash mid-save never points at a partial one).

A failed write or read names the file: torch's writer reports a full disk as "unexpected pos
64 vs 0", so a save that fails on a filesystem with no space left raises ``OSError(ENOSPC)``
naming the checkpoint (found by ``benchmarks/soak/``), and leaves no partial file behind.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import logging
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from trainer.embedded.update import Updater


log = logging.getLogger(__name__)
FULL_BELOW_BYTES = 1 << 20  # a failed save with less room than this left on its filesystem ran out of space


class CheckpointError(RuntimeError):
    """A checkpoint could not be written (for another reason than a full disk) or does not load."""


def _dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / "checkpoints"


def _free_bytes(path: Path) -> int:
    """Bytes this process may still write on ``path``'s filesystem (root may use the reserved blocks)."""
    st = os.statvfs(path)
    return (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize


def _save_failed(tmp: Path, exc: Exception) -> Exception:
    """The error of a failed ``torch.save`` to ``tmp``, naming it; the partial file is deleted."""
    try:
        free = _free_bytes(tmp.parent)  # before the partial file's space comes back
    except OSError:
        free = None
    tmp.unlink(missing_ok=True)
    if free is not None and free < FULL_BELOW_BYTES:
        return OSError(errno.ENOSPC, f"No space left on device: writing checkpoint {tmp} failed with {free} bytes "
                                     f"left on its filesystem ({type(exc).__name__}: {exc})")
    return CheckpointError(f"writing checkpoint {tmp} failed: {type(exc).__name__}: {exc}")


def without_crc32() -> contextlib.AbstractContextManager:
    """torch.save's setting that skips the zip's CRC-32s, for one save (a no-op on a torch
    without the setting). torch.load never checks them: a flipped byte loads either way, and a
    truncated file fails on the zip's directory either way. They cost: smollm2-135m's checkpoint
    (1.6 GB, weights and AdamW's moments) saved in 2.6 s with them against 1.4-1.6 s without
    (medians of two runs of 4 saves, a 2-core Xeon; benchmarks/checkpoint_save.py)."""
    try:
        config = importlib.import_module("torch.utils.serialization").config
    except (ImportError, AttributeError):
        return contextlib.nullcontext()
    return config.patch({"save.compute_crc32": False})


def _point_latest(root: Path, name: str) -> None:
    """Point ``latest`` at the checkpoint directory ``name``, atomically (a crash leaves the old pointer)."""
    tmp = root / "latest.tmp"
    tmp.write_text(name)
    os.replace(tmp, root / "latest")


def save_checkpoint(out_dir: str | Path, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``state`` (tensors, state dicts, plain values) for ``step`` and point ``latest`` at it."""
    root = _dir(out_dir)
    path = root / f"step_{step:06d}"
    path.mkdir(parents=True, exist_ok=True)
    full = {**state, "step": step, "py_random": random.getstate(), "torch_cpu_rng": torch.get_rng_state()}
    tmp = path / "state.pt.tmp"
    try:
        with without_crc32():
            torch.save(full, tmp)
    except Exception as e:  # noqa: BLE001 - re-raised, naming the file (and a full disk)
        raise _save_failed(tmp, e) from e
    os.replace(tmp, path / "state.pt")
    _point_latest(root, path.name)
    for old in sorted(p for p in root.glob("step_*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def load_latest_checkpoint(out_dir: str | Path) -> dict[str, Any] | None:
    """The newest complete checkpoint's state, or None. Restores the global Python/torch RNGs.

    When the checkpoint ``latest`` names does not load (a truncated or corrupt file), the run
    resumes from the newest older one kept beside it that does (``save_checkpoint``'s ``keep``),
    and ``latest`` is pointed at it: the steps after it are re-run. When none loads, the error
    names the file ``latest`` points at."""
    root = _dir(out_dir)
    latest = root / "latest"
    if not latest.exists():
        return None
    named = root / latest.read_text().strip()
    path = named / "state.pt"
    try:
        state = torch.load(path, weights_only=False)
    except Exception as e:  # noqa: BLE001 - an older checkpoint may still serve; else re-raised, naming the file
        older = sorted((p for p in root.glob("step_*") if p.is_dir() and p.name < named.name), reverse=True)
        state = next((s for s in map(_try_load, older) if s is not None), None)
        if state is None:
            raise CheckpointError(f"checkpoint {path} (named by {latest}) does not load: {type(e).__name__}: {e}; "
                                  f"no older checkpoint in {root} loads either") from e
        fallback = root / f"step_{int(state['step']):06d}"
        log.warning("checkpoint %s does not load (%s: %s); resuming from %s", path, type(e).__name__, e, fallback)
        _point_latest(root, fallback.name)
    random.setstate(state["py_random"])
    torch.set_rng_state(state["torch_cpu_rng"])
    return state


def _try_load(folder: Path) -> dict[str, Any] | None:
    try:
        return torch.load(folder / "state.pt", weights_only=False)
    except Exception:  # noqa: BLE001 - a missing or corrupt older checkpoint is skipped
        return None


def numpy_rng_state(rng: np.random.Generator) -> dict:
    return rng.bit_generator.state


def numpy_rng_from_state(state: dict) -> np.random.Generator:
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return rng


@dataclass
class TrainingState:
    """What a run carries from step to step, saved whole so a resumed run reproduces, step for
    step, one that never stopped.

    The RNGs and ``method_state`` are shared objects (the step context and the updater hold the
    same ones), so :meth:`load_state_dict` restores them in place rather than replacing them.

    Checkpoints written before the mini-batch reshuffle have no ``"shuffle_rng"``; they load with
    the shuffle RNG at its seed. A run with one mini-batch never draws from it (it resumes
    exactly); one with several was never reshuffled before its checkpoint, so its resumed steps
    match no single-version run."""

    updater: Updater  # model, optimizer, LR schedule, KL reference, mini-batch shuffle RNG
    sampling_rng: torch.Generator  # the sampler's draws
    curation_rng: np.random.Generator  # the method step's draws (AERO's S3)
    method_state: dict = field(default_factory=dict)  # a method's plain data across steps (aero-mem)
    step: int = 0  # the last completed step
    data_pos: int = 0  # problems of the training stream consumed
    elapsed_s: float = 0.0  # training time summed over steps (timings survive a resume)

    def state_dict(self, sampler: dict[str, Any] | None = None) -> dict[str, Any]:
        """``sampler``: the sampler thread's RNGs, method state and data position before the step
        after this one (asynchronous training, trainer/embedded/pipeline.py), saved in place of
        the shared objects, which that thread has moved on."""
        u = self.updater
        return {
            "model": u.model.state_dict(), "optimizer": u.optimizer.state_dict(), "scheduler": u.scheduler.state_dict(),
            "ref_model": u.ref_model.state_dict() if u.ref_model is not None else None,
            "sampling_rng": self.sampling_rng.get_state(), "curation_rng": numpy_rng_state(self.curation_rng),
            "shuffle_rng": numpy_rng_state(u.shuffle) if u.shuffle is not None else None,
            "method_state": self.method_state, "data_pos": self.data_pos, "elapsed_s": self.elapsed_s,
        } | (sampler or {})

    def load_state_dict(self, ckpt: dict[str, Any]) -> None:
        """Restore from a checkpoint's dict (this version's or an earlier one's, see the class doc)."""
        u = self.updater
        u.model.load_state_dict(ckpt["model"])
        u.optimizer.load_state_dict(ckpt["optimizer"])
        u.scheduler.load_state_dict(ckpt["scheduler"])
        if u.ref_model is not None:
            u.ref_model.load_state_dict(ckpt["ref_model"])
        self.sampling_rng.set_state(ckpt["sampling_rng"])
        self.curation_rng.bit_generator.state = ckpt["curation_rng"]
        if u.shuffle is not None and ckpt.get("shuffle_rng") is not None:
            u.shuffle.bit_generator.state = ckpt["shuffle_rng"]
        self.method_state.clear()
        self.method_state.update(ckpt.get("method_state") or {})
        self.step, self.data_pos, self.elapsed_s = ckpt["step"], ckpt["data_pos"], ckpt.get("elapsed_s", 0.0)

    def save(self, out_dir: str | Path, keep: int = 2, sampler: dict[str, Any] | None = None) -> Path:
        """Checkpoint at ``self.step``, keeping the newest ``keep``; returns its directory."""
        return save_checkpoint(out_dir, self.step, self.state_dict(sampler), keep=keep)

    def resume(self, out_dir: str | Path) -> bool:
        """Load OUT/checkpoints/latest if there is one (global Python/torch RNGs too); whether it did."""
        ckpt = load_latest_checkpoint(out_dir)
        if ckpt is not None:
            self.load_state_dict(ckpt)
        return ckpt is not None
