"""Experiment trackers as metric sinks: Weights & Biases, MLflow and TensorBoard.

A run asks for them in its config (``trackers``), the operator adds some to every run
(``AERO_TRACKERS``) and decides where they write (:class:`TrackerSettings`): W&B offline by
default (no account; ``wandb sync`` uploads the run later), MLflow to the operator's tracking
server or else a local SQLite store in the run directory (``<run>/mlflow.db``), TensorBoard event
files in the run directory.
The run config never names a destination: it is untrusted input, the operator's environment is not.

Each library is an optional extra (``pip install 'aero-lab[trackers]'``) imported only when a
sink is built, so the trainer, backend and dashboard load without them; a run asking for a
tracker whose library is missing fails before any compute, naming the extra.

What each sink receives is what the platform stores: every step's metrics (platform keys,
docs/metrics.md) and each evaluation as ``eval/<benchmark>/avg_at_k`` and ``pass_at_k``. On a
resume, TensorBoard purges the steps after the checkpoint and W&B and MLflow resume the same
run (its id is kept in the run directory); W&B ignores re-logged earlier steps and MLflow keeps
both values of a re-logged step (neither deletes history). :func:`export_run` replays a stored
run (config, steps, evals) into MLflow or TensorBoard after the fact.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.platform.sinks import MetricSink

EXTRA = "pip install 'aero-lab[trackers]'"
LIBRARY = {"wandb": "wandb", "mlflow": "mlflow", "tensorboard": "tensorboard"}


def _env_list(name: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in os.environ.get(name, "").split(",") if x.strip())


@dataclass(frozen=True)
class TrackerSettings:
    """The operator's tracker settings (environment of the worker, or of ``aero train``)."""

    always: tuple[str, ...] = field(default_factory=lambda: _env_list("AERO_TRACKERS"))
    wandb_mode: str = field(default_factory=lambda: os.environ.get("AERO_WANDB_MODE", "offline"))
    wandb_project: str = field(default_factory=lambda: os.environ.get("AERO_WANDB_PROJECT", "aero-lab"))
    mlflow_uri: str | None = field(default_factory=lambda: os.environ.get("AERO_MLFLOW_TRACKING_URI") or None)
    mlflow_experiment: str = field(default_factory=lambda: os.environ.get("AERO_MLFLOW_EXPERIMENT", "aero-lab"))

    def chosen(self, requested: Sequence[str]) -> list[str]:
        """The run's trackers plus the operator's, each once, in a fixed order."""
        unknown = [t for t in self.always if t not in LIBRARY]
        if unknown:
            raise ValueError(f"AERO_TRACKERS names unknown trackers {unknown}; choose from {sorted(LIBRARY)}")
        want = set(requested) | set(self.always)
        return [t for t in LIBRARY if t in want]

    def mlflow_tracking_uri(self, run_dir: Path) -> str:
        return self.mlflow_uri or sqlite_uri(Path(run_dir) / "mlflow.db")


def sqlite_uri(path: Path) -> str:
    """MLflow's local store: a SQLite file (MLflow 3 refuses its old ./mlruns directory store)."""
    return f"sqlite:///{Path(path).resolve()}"


def flat_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, Mapping) and v:
            out.update(flat_config(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def finite(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric, finite values of a step (trackers refuse NaN or strings)."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if math.isfinite(v):
            out[k] = float(v)
    return out


def eval_scalars(results: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """``eval/<benchmark>/avg_at_k`` and ``pass_at_k`` of one evaluation."""
    return finite({f"eval/{b}/{m}": r.get(m) for b, r in results.items() for m in ("avg_at_k", "pass_at_k")})


def _need(name: str):
    import importlib

    try:
        return importlib.import_module(LIBRARY[name])
    except ImportError as e:
        raise ImportError(f"the {name} tracker needs its library: {EXTRA}") from e


class TensorBoardSink(MetricSink):
    """Scalars per step into TensorBoard event files under ``log_dir`` (torch's SummaryWriter).
    A resume purges the steps after the checkpoint (``purge_step``)."""

    def __init__(self, log_dir: str | Path, config: Mapping[str, Any] | None = None):
        _need("tensorboard")
        self.log_dir = Path(log_dir)
        self.config = dict(config or {})
        self._writer: Any = None

    def _open(self, purge_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        if self._writer is not None:
            self._writer.close()
        self._writer = SummaryWriter(str(self.log_dir), purge_step=purge_step)
        if self.config and purge_step is None:
            self._writer.add_text("config", "```\n" + json.dumps(self.config, indent=2) + "\n```", 0)
        return self._writer

    @property
    def writer(self):
        return self._writer or self._open()

    def truncate_after(self, step: int) -> None:
        self._open(purge_step=step + 1)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for k, v in finite(metrics).items():
            self.writer.add_scalar(k, v, step)

    def log_eval(self, step: int, results: dict[str, dict[str, Any]]) -> None:
        for k, v in eval_scalars(results).items():
            self.writer.add_scalar(k, v, step)

    def before_checkpoint(self, step: int) -> None:
        self.writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class MlflowSink(MetricSink):
    """One MLflow run per platform run (its id kept in ``<run dir>/mlflow_run_id``, so a resume
    continues it), through ``MlflowClient`` (no global active run in a long-lived worker)."""

    def __init__(self, tracking_uri: str, experiment: str, run_name: str, config: Mapping[str, Any] | None,
                 run_dir: str | Path):
        _need("mlflow")
        from mlflow import MlflowClient

        self.client = MlflowClient(tracking_uri)
        exp = self.client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(experiment)
        id_file = Path(run_dir) / "mlflow_run_id"
        known = id_file.read_text().strip() if id_file.exists() else ""
        if known:
            self.run_id = known
        else:
            self.run_id = self.client.create_run(exp_id, run_name=run_name).info.run_id
            Path(run_dir).mkdir(parents=True, exist_ok=True)
            id_file.write_text(self.run_id)
            self._params(config or {})

    def _params(self, config: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        params = [Param(k, json.dumps(v) if not isinstance(v, str) else v)
                  for k, v in sorted(flat_config(config).items())]
        for i in range(0, len(params), 100):  # MLflow's batch limit
            self.client.log_batch(self.run_id, params=params[i:i + 100])

    def _metrics(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        ms = [Metric(k.replace("@", "_at_"), v, now, step) for k, v in values.items()]
        for i in range(0, len(ms), 1000):
            self.client.log_batch(self.run_id, metrics=ms[i:i + 1000])

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._metrics(step, finite(metrics))

    def log_eval(self, step: int, results: dict[str, dict[str, Any]]) -> None:
        self._metrics(step, eval_scalars(results))

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class WandbSink(MetricSink):
    """A W&B run per platform run, offline unless the operator says otherwise (files under
    ``<dir>/wandb``; ``wandb sync`` uploads them). Its id is kept in ``<dir>/wandb_run_id`` so a
    resume continues the same W&B run."""

    def __init__(self, dir: str | Path, project: str, run_name: str, config: Mapping[str, Any] | None,
                 mode: str = "offline"):
        wandb = _need("wandb")
        d = Path(dir)
        d.mkdir(parents=True, exist_ok=True)
        id_file = d / "wandb_run_id"
        run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)
        id_file.write_text(run_id)
        self.run = wandb.init(project=project, name=run_name, id=run_id, resume="allow", dir=str(d), mode=mode,
                              config=dict(config or {}), reinit="create_new",
                              settings=wandb.Settings(console="off", x_disable_stats=True, silent=True))
        self.last_step = -1

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if step > self.last_step:  # W&B steps only increase
            self.run.log(finite(metrics), step=step)
            self.last_step = step

    def log_eval(self, step: int, results: dict[str, dict[str, Any]]) -> None:
        if step >= self.last_step:
            self.run.log(eval_scalars(results), step=step)
            self.last_step = step

    def close(self) -> None:
        self.run.finish()


def make_tracker(name: str, run_dir: str | Path, run_name: str, config: Mapping[str, Any],
                 settings: TrackerSettings) -> MetricSink:
    """The sink of tracker ``name`` for one run writing under ``run_dir``."""
    run_dir = Path(run_dir)
    if name == "tensorboard":
        return TensorBoardSink(run_dir / "tensorboard", config)
    if name == "mlflow":
        return MlflowSink(settings.mlflow_tracking_uri(run_dir), settings.mlflow_experiment, run_name, config, run_dir)
    if name == "wandb":
        return WandbSink(run_dir, settings.wandb_project, run_name, config, settings.wandb_mode)
    raise ValueError(f"unknown tracker {name!r}; choose from {sorted(LIBRARY)}")


def make_trackers(requested: Sequence[str], run_dir: str | Path, run_name: str, config: Mapping[str, Any],
                  settings: TrackerSettings | None = None) -> list[MetricSink]:
    settings = settings or TrackerSettings()
    return [make_tracker(n, run_dir, run_name, config, settings) for n in settings.chosen(requested)]


def verl_env(requested: Sequence[str], run_dir: str | Path, settings: TrackerSettings | None = None) -> dict[str, str]:
    """The environment verl's own trackers read (verl.utils.tracking), pointing them where this
    module's sinks would write: the run directory, the operator's MLflow and W&B mode."""
    settings = settings or TrackerSettings()
    chosen, run_dir = settings.chosen(requested), Path(run_dir).resolve()
    env: dict[str, str] = {}
    if "wandb" in chosen:
        env.update(WANDB_MODE=settings.wandb_mode, WANDB_DIR=str(run_dir), WANDB_PROJECT=settings.wandb_project)
    if "mlflow" in chosen:
        env["MLFLOW_TRACKING_URI"] = settings.mlflow_tracking_uri(run_dir)
    if "tensorboard" in chosen:
        env["TENSORBOARD_DIR"] = str(run_dir / "tensorboard")
    return env


def export_run(kind: str, out_dir: str | Path, run_name: str, config: Mapping[str, Any],
               steps: Sequence[Mapping[str, Any]], evals: Mapping[int, Mapping[str, Mapping[str, Any]]]) -> Path:
    """Replay a stored run into ``kind`` (tensorboard | mlflow) under ``out_dir``: its config,
    every step (``[{"step": s, **metrics}]``) and every evaluation (``{step: results}``).
    Returns what to open: the directory for ``tensorboard --logdir``, the SQLite file for
    ``mlflow ui --backend-store-uri sqlite:///<it>``."""
    out_dir = Path(out_dir)
    if kind == "tensorboard":
        sink: MetricSink = TensorBoardSink(out_dir / "tensorboard", config)
        where = out_dir / "tensorboard"
    elif kind == "mlflow":
        import tempfile

        out_dir.mkdir(parents=True, exist_ok=True)
        where = out_dir / "mlflow.db"
        with tempfile.TemporaryDirectory() as fresh:  # a new MLflow run on every export
            sink = MlflowSink(sqlite_uri(where), "aero-lab", run_name, config, fresh)
    else:
        raise ValueError(f"export to tensorboard or mlflow; got {kind!r}")
    for row in steps:
        sink.log(int(row["step"]), {k: v for k, v in row.items() if k != "step"})
    for step, results in sorted(evals.items()):
        sink.log_eval(int(step), dict(results))
    sink.close()
    return where
