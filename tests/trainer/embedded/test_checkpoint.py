"""A checkpoint that cannot be written or read fails with an error that names the file, and a
full disk as a full disk (benchmarks/soak/ found torch reporting it as "unexpected pos 64 vs 0")."""

from __future__ import annotations

import errno

import pytest
import torch

from trainer.embedded import checkpoint
from trainer.embedded.checkpoint import CheckpointError, load_latest_checkpoint, save_checkpoint


def failing_save(obj, f):
    """torch.save as it fails on a full filesystem: part of the file written, then its writer's error."""
    with open(f, "wb") as fh:
        fh.write(b"PK\x03\x04partial")
    raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")


def test_a_save_on_a_full_disk_is_no_space_left_names_the_checkpoint_and_leaves_nothing_behind(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, 1, {"w": torch.zeros(3)})
    monkeypatch.setattr(checkpoint.torch, "save", failing_save)
    monkeypatch.setattr(checkpoint, "_free_bytes", lambda path: 0)
    with pytest.raises(OSError) as info:
        save_checkpoint(tmp_path, 2, {"w": torch.zeros(3)})
    e = info.value
    assert e.errno == errno.ENOSPC and "No space left on device" in str(e)
    assert "step_000002/state.pt.tmp" in str(e) and "unexpected pos 64 vs 0" in str(e)
    assert not (tmp_path / "checkpoints" / "step_000002" / "state.pt.tmp").exists()
    assert (tmp_path / "checkpoints" / "latest").read_text() == "step_000001"  # still the last complete one
    assert load_latest_checkpoint(tmp_path)["step"] == 1


def test_a_save_failing_with_room_left_names_the_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint.torch, "save", failing_save)
    monkeypatch.setattr(checkpoint, "_free_bytes", lambda path: 10 << 30)
    with pytest.raises(CheckpointError, match=r"writing checkpoint .*step_000001/state\.pt\.tmp failed: RuntimeError"):
        save_checkpoint(tmp_path, 1, {"w": torch.zeros(3)})
    assert not (tmp_path / "checkpoints" / "latest").exists()


def test_a_truncated_checkpoint_does_not_load_and_the_error_names_it(tmp_path):
    save_checkpoint(tmp_path, 3, {"w": torch.zeros(1000)})
    state = tmp_path / "checkpoints" / "step_000003" / "state.pt"
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=r"checkpoint .*step_000003/state\.pt \(named by .*latest\) does not load"):
        load_latest_checkpoint(tmp_path)


def test_a_corrupt_latest_checkpoint_falls_back_to_the_newest_older_one_that_loads(tmp_path, caplog):
    """The run resumes from the last good checkpoint (the steps after it are re-run), and
    ``latest`` names it from then on; the warning names the file that did not load."""
    for step in (2, 4):
        save_checkpoint(tmp_path, step, {"w": torch.full((1000,), float(step))})
    bad = tmp_path / "checkpoints" / "step_000004" / "state.pt"
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    with caplog.at_level("WARNING"):
        state = load_latest_checkpoint(tmp_path)
    assert state["step"] == 2 and float(state["w"][0]) == 2.0
    assert (tmp_path / "checkpoints" / "latest").read_text() == "step_000002"
    assert "step_000004/state.pt does not load" in caplog.text and "resuming from" in caplog.text
    # the next save of step 4 replaces the corrupt one, and latest follows it
    save_checkpoint(tmp_path, 4, {"w": torch.full((1000,), 4.0)})
    assert load_latest_checkpoint(tmp_path)["step"] == 4
