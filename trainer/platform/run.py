"""The one entry point that trains a run on its engine: :func:`run_training` looks the engine up in
its registry (trainer/spec/engine_registry.py), places a GPU run of an engine that does not place
itself (trainer/platform/placement.py), and calls the engine's ``run``.

The run contract, shared by every engine::

    run(cfg, out_dir, sink, *, should_stop=None, progress=None, policy=None) -> summary

trains (or resumes from ``out_dir``'s checkpoint) the parsed ``RunConfig`` to its end,
writes each step's metrics to ``sink`` (keys in common/metric_keys.py), calls
``progress(step, steps, metrics)`` after each step, stops at a step boundary when
``should_stop()`` says so, and returns ``{"status": "completed" | "stopped", "last_step",
"final_eval", ...}``. ``policy`` is the operator's (trainer/spec/operator_policy.py). An engine
that places its own work on Ray (``uses_ray``) also takes ``on_wait(text | None)``, told what the
run waits for while its GPUs are taken and None once placed, and ``on_placed(summary)``
(trainer/platform/placement.py); :func:`run_training` places the other engines' GPU runs itself.

Light at import (stdlib only): the engines, placement and torch load when a run starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from common.refs import load
from trainer.spec.engine_registry import get_engine

if TYPE_CHECKING:
    from trainer.spec.config import RunConfig
    from trainer.spec.operator_policy import RunPolicy
    from trainer.platform.sinks import MetricSink


def run_training(cfg: RunConfig, out_dir: str | Path, sink: MetricSink,
                 should_stop: Callable[[], bool] | None = None,
                 progress: Callable[[int, int, dict], None] | None = None,
                 policy: RunPolicy | None = None,
                 on_wait: Callable[[str | None], None] | None = None,
                 on_placed: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Train (or resume) one run to its end on the engine its config names (the contract in the
    module docstring). ``cfg`` was parsed once, at the boundary (``parse_run_config(data,
    policy)``: the API, the worker, the CLI). A GPU run of an engine that does not place itself
    holds its GPU through the operator's Ray cluster when there is one (trainer/platform/placement.py):
    ``on_wait`` hears what it waits for, ``on_placed`` where it landed; stopped while it waits,
    it returns ``{"status": "stopped", "last_step": None}`` without training."""
    spec = get_engine(cfg.engine)
    run = load(spec.run)
    if spec.uses_ray:
        return run(cfg, out_dir, sink, should_stop=should_stop, progress=progress, policy=policy, on_wait=on_wait,
                   on_placed=on_placed)
    from trainer.platform.placement import placed_embedded, wants_placement
    from trainer.spec.resources import gpus_per_node

    cuda = cfg.device == "cuda" or (cfg.device == "auto" and _cuda_available())
    gpus = gpus_per_node(cfg, cuda)
    if not wants_placement(False, gpus):
        return run(cfg, out_dir, sink, should_stop=should_stop, progress=progress, policy=policy)
    with placed_embedded(gpus, cuda, should_stop, on_wait) as placement:
        if placement is None:
            return {"status": "stopped", "last_step": None, "final_eval": None}
        if on_placed is not None:
            on_placed(placement.summary())
        return run(cfg, out_dir, sink, should_stop=should_stop, progress=progress, policy=policy)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()
