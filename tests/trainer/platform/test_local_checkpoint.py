"""trainer/platform/local_checkpoint.py: the step of the checkpoint a run directory holds, for either
engine's layout, read without torch or verl."""

from __future__ import annotations

import subprocess
import sys

from trainer.platform.local_checkpoint import local_checkpoint_step


def embedded(out, *steps, latest=None):
    root = out / "checkpoints"
    for step in steps:
        (root / f"step_{step:06d}").mkdir(parents=True)
        (root / f"step_{step:06d}" / "state.pt").write_bytes(b"x")
    if latest is not None:
        (root / "latest").write_text(f"step_{latest:06d}\n")


def test_none_in_an_empty_or_missing_run_directory(tmp_path):
    assert local_checkpoint_step(tmp_path / "no-such-dir") is None
    assert local_checkpoint_step(tmp_path) is None
    embedded(tmp_path, 2)  # a step directory without the 'latest' pointer: the loader starts at 0
    assert local_checkpoint_step(tmp_path) is None


def test_embedded_latest_and_its_fallback_to_an_older_one(tmp_path):
    embedded(tmp_path, 2, 4, latest=4)
    assert local_checkpoint_step(tmp_path) == 4
    (tmp_path / "checkpoints" / "step_000004" / "state.pt").unlink()  # the loader falls back as well
    assert local_checkpoint_step(tmp_path) == 2
    (tmp_path / "checkpoints" / "step_000002" / "state.pt").unlink()
    assert local_checkpoint_step(tmp_path) is None


def test_verl_marker(tmp_path):
    marker = tmp_path / "verl_checkpoints" / "latest_checkpointed_iteration.txt"
    marker.parent.mkdir()
    marker.write_text("6\n")
    assert local_checkpoint_step(tmp_path) == 6
    marker.write_text("garbage")
    assert local_checkpoint_step(tmp_path) is None


def test_loads_neither_torch_nor_verl():
    code = ("import sys, trainer.platform.local_checkpoint; "
            "assert not {'torch', 'verl', 'numpy'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
