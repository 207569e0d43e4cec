"""Which checkpoint a run directory holds, for either engine, without loading it (stdlib only:
no torch, no verl), so the worker can compare it with the checkpoint the store records before
it starts an engine (worker/runner.py, :func:`worker.runner.reconcile_checkpoints`).

The two layouts, as their engines write and resume them:

- embedded (trainer/embedded/checkpoint.py): OUT/checkpoints/latest names the newest complete
  ``step_NNNNNN`` directory, whose ``state.pt`` is the checkpoint; when that file is missing the
  loader falls back to the newest older ``step_*`` directory beside it, so this does too. No
  ``latest`` pointer: no checkpoint (the loader starts from step 0).
- verl (trainer/verl/step_metrics.py ``latest_checkpoint_step``): the step written in
  OUT/verl_checkpoints/latest_checkpointed_iteration.txt.

A checkpoint file that exists but is corrupt still counts here; the engine's own resume falls
back from it (embedded) and drops the store's rows past the step it really resumed from.
"""

from __future__ import annotations

import shutil
from pathlib import Path

EMBEDDED_DIR = "checkpoints"
VERL_DIR = "verl_checkpoints"
VERL_MARKER = "latest_checkpointed_iteration.txt"


def _step_of(name: str) -> int | None:
    digits = name.removeprefix("step_")
    return int(digits) if name.startswith("step_") and digits.isdigit() else None


def _embedded_step(out_dir: Path) -> int | None:
    root = out_dir / EMBEDDED_DIR
    try:
        named = (root / "latest").read_text().strip()
    except OSError:
        return None
    candidates = [named] + sorted((p.name for p in root.glob("step_*") if p.name < named), reverse=True)
    for name in candidates:
        step = _step_of(name)
        if step is not None and (root / name / "state.pt").is_file():
            return step
    return None


def _verl_step(out_dir: Path) -> int | None:
    try:
        step = int((out_dir / VERL_DIR / VERL_MARKER).read_text().strip())
    except (OSError, ValueError):
        return None
    return step if step > 0 else None


def local_checkpoint_step(out_dir: str | Path) -> int | None:
    """The step of the newest checkpoint this host can resume ``out_dir`` from (either engine's
    layout), or None when it holds none."""
    steps = [s for s in (_embedded_step(Path(out_dir)), _verl_step(Path(out_dir))) if s is not None]
    return max(steps) if steps else None


__all__ = ["local_checkpoint_step"]


def prune_verl_steps(root: Path, keep: int) -> list[Path]:
    """Delete every ``global_step_N`` folder of ``root`` (OUT/verl_checkpoints) but the newest
    ``keep`` (0 keeps all); returns the deleted ones. verl's ``max_actor_ckpt_to_keep`` deletes only
    each old step's ``actor/`` folder, leaving its data-loader state and the curation state
    behind: a husk no resume must pick."""
    steps = sorted((p for p in Path(root).glob("global_step_*") if p.is_dir() and p.name[12:].isdigit()),
                   key=lambda p: int(p.name[12:]))
    old = steps[:-keep] if keep > 0 else []
    for p in old:
        shutil.rmtree(p, ignore_errors=True)
    return old
