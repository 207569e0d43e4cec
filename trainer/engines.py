"""The training-engine registry and the one entry point that trains a run on its engine.

An engine is a package with a ``run`` function of the contract below, registered here with
what the platform needs to know about it (the config's ``engine`` choices, the submit-time
rules, which queue runs it, whether it logs to trackers itself). Adding an engine is its
package plus one entry in :data:`ENGINE_SPECS`; the methods it can run say so themselves
(``MethodSpec.needs.engines``, trainer/methods/spec.py), as the tasks do (``TaskSpec.engines``).

Light on purpose (stdlib only): the API's config validation imports it. Functions are named
as ``"module:attribute"`` and imported when used, so a heavy engine (verl pulls Ray) costs
nothing until a run uses it.

The run contract, shared by every engine::

    run(cfg, out_dir, sink, *, should_stop=None, progress=None, policy=None) -> summary

trains (or resumes from ``out_dir``'s checkpoint) the parsed ``RunConfig`` to its end,
writes each step's metrics to ``sink`` (keys in common/metric_keys.py), calls
``progress(step, steps, metrics)`` after each step, stops at a step boundary when
``should_stop()`` says so, and returns ``{"status": "completed" | "stopped", "last_step",
"final_eval", ...}``. ``policy`` is the operator's (trainer/operator_policy.py). An engine
that places its own work on Ray (``uses_ray``) also takes ``on_wait(text | None)``, told what the
run waits for while its GPUs are taken and None once placed, and ``on_placed(summary)``
(trainer/placement.py); :func:`run_training` places the other engines' GPU runs itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from common.refs import load

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from trainer.operator_policy import RunPolicy
    from trainer.sinks import MetricSink


@dataclass(frozen=True)
class EngineSpec:
    name: str
    description: str  # one line for help texts
    run: str  # "module:function" with the run contract above
    # "module:function(cfg) -> [(field, message)]": the engine's own submit-time rules, beyond
    # what every engine shares (trainer/config.py); None when it has none
    rules: str | None = None
    # True when the engine logs to the run's trackers itself (its own loggers), so the platform
    # attaches no tracker sinks (one set of tracker files per run)
    own_trackers: bool = False
    # True when a run with device="auto" goes to the GPU queue (an engine made for clusters)
    gpu_by_default: bool = False
    # True when the engine runs on Ray and places its workers itself (trainer/placement.py):
    # its run function takes on_wait and on_placed
    uses_ray: bool = False
    extra: str | None = None  # the pip extra that installs it, for error messages


ENGINE_SPECS: dict[str, EngineSpec] = {s.name: s for s in (
    EngineSpec("embedded", "the platform's own single-process trainer (CPU or one GPU; no extra installs)",
               run="trainer.embedded.loop:run_embedded"),
    EngineSpec("verl", "verl 0.9.1's RayPPOTrainer (Ray, FSDP; vLLM or our HF rollout), for clusters and the CPU",
               run="trainer.verl:run_verl", rules="trainer.verl.rules:verl_issues", own_trackers=True,
               gpu_by_default=True, uses_ray=True, extra="verl"),
)}
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINE_SPECS)


def get_engine(name: str) -> EngineSpec:
    try:
        return ENGINE_SPECS[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINE_NAMES)}") from None


def engine_issues(cfg: RunConfig) -> list[tuple[str, str]]:
    """The run's engine's own submit-time rules (empty for an engine without any)."""
    spec = get_engine(cfg.engine)
    return list(load(spec.rules)(cfg)) if spec.rules else []


def run_training(cfg: RunConfig, out_dir: str | Path, sink: MetricSink,
                 should_stop: Callable[[], bool] | None = None,
                 progress: Callable[[int, int, dict], None] | None = None,
                 policy: RunPolicy | None = None,
                 on_wait: Callable[[str | None], None] | None = None,
                 on_placed: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Train (or resume) one run to its end on the engine its config names (the contract in the
    module docstring). ``cfg`` was parsed once, at the boundary (``parse_run_config(data,
    policy)``: the API, the worker, the CLI). A GPU run of an engine that does not place itself
    holds its GPU through the operator's Ray cluster when there is one (trainer/placement.py):
    ``on_wait`` hears what it waits for, ``on_placed`` where it landed; stopped while it waits,
    it returns ``{"status": "stopped", "last_step": None}`` without training."""
    spec = get_engine(cfg.engine)
    run = load(spec.run)
    if spec.uses_ray:
        return run(cfg, out_dir, sink, should_stop=should_stop, progress=progress, policy=policy, on_wait=on_wait,
                   on_placed=on_placed)
    from trainer.placement import placed_embedded, wants_placement
    from trainer.resources import gpus_per_node

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
