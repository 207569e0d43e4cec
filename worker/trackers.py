"""The trackers a run logs to from the worker (trainer/platform/trackers.py). On the embedded engine the
worker attaches the tracker sinks beside the store's; an engine with its own trackers
(``EngineSpec.own_trackers``, trainer/spec/engine_registry.py) gets none: on verl the run's trackers are verl's own
loggers (``trainer.logger``, trainer/verl/overrides.py), which log verl's native metric names and
its validation generations, so the worker attaches none (one set of files per run)."""

from __future__ import annotations

from pathlib import Path

from trainer.spec.config import RunConfig
from trainer.spec.engine_registry import get_engine
from trainer.platform.sinks import MetricSink
from trainer.platform.trackers import TrackerSettings, make_trackers


def tracker_sinks(cfg: RunConfig, out_dir: str | Path, run_name: str,
                  settings: TrackerSettings | None = None) -> list[MetricSink]:
    if get_engine(cfg.engine).own_trackers:
        return []
    return make_trackers(cfg.trackers, out_dir, run_name, cfg.model_dump(mode="json"), settings)
