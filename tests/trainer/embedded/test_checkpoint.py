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


@pytest.mark.parametrize("keep", [1, 3])
def test_a_run_keeps_the_checkpoints_it_asks_for_and_resumes_from_the_newest(tmp_path, keep):
    # a 4-step run checkpointing every step keeps `keep_checkpoints` on disk, and a longer run resumes
    from trainer.spec.config import parse_run_config
    from trainer.platform.run import run_training
    from trainer.platform.sinks import MemorySink

    base = {"steps": 4, "batch_prompts": 2, "n_total": 4, "aero": {"n_explore": 2}, "eval_every": 0,
            "eval_problems": 2, "eval_n": 2, "checkpoint_every": 1, "keep_checkpoints": keep, "device": "cpu"}
    sink = MemorySink()
    run_training(parse_run_config(base), tmp_path, sink)
    assert [s for s, _ in sink.checkpoints] == [1, 2, 3, 4]  # every save announced
    kept = sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*"))
    assert kept == [f"step_{s:06d}" for s in range(5 - keep, 5)]
    summary = run_training(parse_run_config({**base, "steps": 5}), tmp_path, MemorySink())
    assert summary["status"] == "completed" and summary["last_step"] == 5
    assert len(list((tmp_path / "checkpoints").glob("step_*"))) == keep


def test_the_operator_caps_the_checkpoints_a_run_keeps():
    from trainer.spec.config import ConfigError, parse_run_config
    from trainer.spec.operator_policy import RunPolicy

    policy = RunPolicy.from_env({"AERO_MAX_KEEP_CHECKPOINTS": "3"})
    assert parse_run_config({"keep_checkpoints": 3}, policy).keep_checkpoints == 3
    with pytest.raises(ConfigError) as e:
        parse_run_config({"keep_checkpoints": 4}, policy)
    assert e.value.issues == [("keep_checkpoints", "at most 3 (operator cap AERO_MAX_KEEP_CHECKPOINTS)")]
    with pytest.raises(ConfigError) as e:
        parse_run_config({"keep_checkpoints": 0})
    assert e.value.issues[0][0] == "keep_checkpoints"


def test_verl_step_folders_beyond_the_kept_ones_are_deleted_whole(tmp_path):
    from trainer.platform.local_checkpoint import prune_verl_steps

    for s in (1, 2, 9, 10, 11):
        (tmp_path / f"global_step_{s}" / "actor").mkdir(parents=True)
        (tmp_path / f"global_step_{s}" / "curation_state.json").write_text("{}")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("11")
    gone = prune_verl_steps(tmp_path, 2)
    assert sorted(p.name for p in gone) == ["global_step_1", "global_step_2", "global_step_9"]  # by number, not name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_10", "global_step_11",
                                                           "latest_checkpointed_iteration.txt"]
    assert prune_verl_steps(tmp_path, 0) == []


def test_a_checkpoint_is_written_without_crc32s_and_the_setting_is_restored(tmp_path):
    """torch.load never checks the zip's CRC-32s, so the save skips them (most of a large save's
    time); the torch-wide setting is only changed for that save, and the state round-trips."""
    import zipfile

    import torch.utils.serialization as ser

    before = ser.config.save.compute_crc32
    w = torch.randn(4096, generator=torch.Generator().manual_seed(0))
    save_checkpoint(tmp_path, 1, {"w": w})
    assert ser.config.save.compute_crc32 == before
    with zipfile.ZipFile(tmp_path / "checkpoints" / "step_000001" / "state.pt") as z:
        data = [i for i in z.infolist() if "/data/" in i.filename]
    assert data and all(i.CRC == 0 for i in data)  # with CRCs on, a tensor of random floats has a nonzero one
    assert torch.equal(load_latest_checkpoint(tmp_path)["w"], w)
