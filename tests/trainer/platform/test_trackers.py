"""The tracker sinks (trainer/platform/trackers.py) against their real libraries, offline: each run's
steps and evals are read back with the library's own reader (TensorBoard's event reader,
MLflow's client over its file store, W&B's offline run file), and a stored run is exported."""

import json
import math
import time
from pathlib import Path

import pytest

from trainer.platform.trackers import (MlflowSink, TensorBoardSink, TrackerSettings, WandbSink, export_run, make_trackers,
                                       verl_env)

STEPS = {1: {"reward/mean": 0.25, "loss/policy": 0.5, "train/grad_norm": float("nan")},
         2: {"reward/mean": 0.5, "loss/policy": 0.25, "train/grad_norm": 1.5}}
EVAL = {"overall": {"avg_at_k": 0.4, "pass_at_k": 0.75, "k": 8}, "b1": {"avg_at_k": 0.3, "pass_at_k": 0.5}}
CONFIG = {"method": "aero", "steps": 2, "aero": {"k": 4.0}, "benchmarks": {}}


def feed(sink, steps=STEPS):
    for s, m in steps.items():
        sink.log(s, dict(m))
    sink.log_eval(2, EVAL)
    sink.close()


def tb_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_sink_writes_scalars_and_purges_after_a_resume(tmp_path):
    pytest.importorskip("tensorboard")
    feed(TensorBoardSink(tmp_path / "tb", CONFIG))
    got = tb_scalars(tmp_path / "tb")
    assert got["reward/mean"] == [(1, 0.25), (2, 0.5)]
    assert got["train/grad_norm"] == [(2, 1.5)]  # NaN is not written
    assert got["eval/overall/avg_at_k"] == [(2, pytest.approx(0.4))] and got["eval/b1/pass_at_k"] == [(2, 0.5)]
    # a resume from the checkpoint of step 1 re-logs step 2 with other values: the old step 2 is purged
    resumed = TensorBoardSink(tmp_path / "tb", CONFIG)
    resumed.truncate_after(1)
    resumed.log(2, {"reward/mean": 0.75})
    resumed.close()
    assert tb_scalars(tmp_path / "tb")["reward/mean"] == [(1, 0.25), (2, 0.75)]


def test_mlflow_sink_local_store_keeps_params_metrics_and_resumes_the_same_run(tmp_path):
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    feed(MlflowSink(uri, "aero-lab", "run-7", CONFIG, tmp_path / "run"))
    client = MlflowClient(uri)
    run_id = (tmp_path / "run" / "mlflow_run_id").read_text()
    run = client.get_run(run_id)
    assert run.info.run_name == "run-7" and run.info.status == "FINISHED"
    assert run.data.params["aero.k"] == "4.0" and run.data.params["method"] == "aero"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "reward/mean")] == [(1, 0.25), (2, 0.5)]
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "eval/overall/avg_at_k")] == [(2, 0.4)]
    assert [m.step for m in client.get_metric_history(run_id, "train/grad_norm")] == [2]
    again = MlflowSink(uri, "aero-lab", "run-7", CONFIG, tmp_path / "run")  # a resumed run continues its MLflow run
    again.log(3, {"reward/mean": 1.0})
    again.close()
    assert again.run_id == run_id and len(client.get_metric_history(run_id, "reward/mean")) == 3


def wandb_records(path: Path) -> list[bytes]:
    """The records of a W&B run file: a 7-byte header (":W&B", magic, version), then LevelDB-log
    blocks of 32 KiB whose records carry a 7-byte header (CRC-32, length, type: full, first,
    middle, last). W&B 0.31 writes it from its Go core and ships no Python reader."""
    data = path.read_bytes()
    if len(data) < 7:
        return []  # not written yet
    assert data[:4] == b":W&B"
    pos, out, buf = 7, [], b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            out.append(buf)
            buf = b""
    return out


def wandb_history(run_dir: Path, timeout_s: float = 60.0) -> list[dict]:
    """The history rows of the offline run under ``run_dir``, parsed with W&B's own protobuf.
    W&B 0.31's ``finish()`` can return before its core process has written the offline file
    (seen once in 8 runs: an empty file, complete 2 s later), so this waits for the run's
    ``exit`` record."""
    from wandb.proto import wandb_internal_pb2

    deadline = time.monotonic() + timeout_s
    while True:
        paths = list(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
        records = []
        for data in wandb_records(paths[0]) if len(paths) == 1 else []:
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(data)
            records.append(rec)
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            break
        assert time.monotonic() < deadline, f"no complete W&B offline run under {run_dir} after {timeout_s} s"
        time.sleep(0.2)
    rows = []
    for rec in records:
        if rec.WhichOneof("record_type") == "history":
            row = {it.key or "/".join(it.nested_key): json.loads(it.value_json) for it in rec.history.item}
            rows.append({"_step": rec.history.step.num, **row})
    return rows


def test_wandb_sink_offline_needs_no_account(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    feed(WandbSink(tmp_path, "aero-lab", "run-7", CONFIG, mode="offline"))
    rows = wandb_history(tmp_path)
    by_step = {r["_step"]: r for r in rows}
    assert by_step[1]["reward/mean"] == 0.25 and "train/grad_norm" not in by_step[1]
    assert by_step[2]["loss/policy"] == 0.25 and by_step[2]["eval/overall/avg_at_k"] == 0.4
    assert (tmp_path / "wandb_run_id").read_text().strip()


def test_make_trackers_adds_the_operators_and_points_verl_at_the_run_dir(tmp_path):
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    settings = TrackerSettings(always=("tensorboard",), wandb_mode="offline", wandb_project="p", mlflow_uri=None,
                               mlflow_experiment="e")
    sinks = make_trackers(["mlflow"], tmp_path, "r", CONFIG, settings)
    assert [type(s).__name__ for s in sinks] == ["MlflowSink", "TensorBoardSink"]
    for s in sinks:
        s.close()
    env = verl_env(["wandb"], tmp_path, settings)
    assert env["TENSORBOARD_DIR"] == str((tmp_path / "tensorboard").resolve()) and env["WANDB_MODE"] == "offline"
    assert env["WANDB_DIR"] == str(tmp_path.resolve()) and "MLFLOW_TRACKING_URI" not in env
    with pytest.raises(ValueError, match="unknown trackers"):
        TrackerSettings(always=("neptune",)).chosen([])


def test_a_missing_library_names_the_extra(monkeypatch):
    import trainer.platform.trackers as trackers

    monkeypatch.setitem(trackers.LIBRARY, "wandb", "aero_lab_not_installed")  # an install without the extra
    with pytest.raises(ImportError, match=r"aero-lab\[trackers\]"):
        WandbSink("/nonexistent", "p", "r", {})


@pytest.mark.parametrize("kind", ["tensorboard", "mlflow"])
def test_export_run_replays_config_steps_and_evals(tmp_path, kind):
    pytest.importorskip(kind)
    steps = [{"step": s, **m} for s, m in STEPS.items()]
    where = export_run(kind, tmp_path, "7-aero", CONFIG, steps, {0: {"overall": {"avg_at_k": 0.1}}, 2: EVAL})
    if kind == "tensorboard":
        got = tb_scalars(where)
        assert got["reward/mean"] == [(1, 0.25), (2, 0.5)]
        assert [s for s, _ in got["eval/overall/avg_at_k"]] == [0, 2]
    else:
        from mlflow import MlflowClient

        client = MlflowClient(f"sqlite:///{where.resolve()}")
        (run,) = client.search_runs([client.get_experiment_by_name("aero-lab").experiment_id])
        assert run.info.run_name == "7-aero" and run.data.params["steps"] == "2"
        hist = client.get_metric_history(run.info.run_id, "eval/overall/avg_at_k")
        assert [(m.step, math.isclose(m.value, v)) for m, v in zip(hist, (0.1, 0.4))] == [(0, True), (2, True)]
