"""The training-engine registry: one :class:`EngineSpec` per engine, what the platform needs to
know about it (the config's ``engine`` choices, its own submit-time rules, which
trainer/spec/config_rules.py's ``engine_issues`` checks, which queue runs it, whether it logs to
trackers itself, whether it spans GPUs and nodes, what a worker preloads). Adding an engine is its
package plus one entry in :data:`ENGINE_SPECS`; the methods it can run say so themselves
(``MethodSpec.needs.engines``, trainer/methods/spec.py), as the tasks do (``TaskSpec.engines``).
trainer/platform/run.py's ``run_training`` is the entry point that trains a run on its engine,
and its docstring holds the run contract every engine's ``run`` keeps.

Stdlib only: the API's config validation imports it, and so do trainer/spec/config.py and
trainer/spec/resources.py. Functions are named as ``"module:attribute"`` and imported when used,
so a heavy engine (verl pulls Ray) costs nothing until a run uses it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineSpec:
    name: str
    description: str  # one line for help texts
    run: str  # "module:function" with the run contract (trainer/platform/run.py)
    # "module:function(cfg) -> [(field, message)]": the engine's own submit-time rules, beyond
    # what every engine shares (trainer/spec/config.py); None when it has none
    rules: str | None = None
    # True when the engine logs to the run's trackers itself (its own loggers), so the platform
    # attaches no tracker sinks (one set of tracker files per run)
    own_trackers: bool = False
    # True when a run with device="auto" goes to the GPU queue (an engine made for clusters)
    gpu_by_default: bool = False
    # True when the engine runs on Ray and places its workers itself (trainer/platform/placement.py):
    # its run function takes on_wait and on_placed
    uses_ray: bool = False
    # True when a run can span several GPUs, nodes and tensor-parallel rollout replicas (FSDP
    # ranks); such a run holds at least one (logical) GPU. False: one device of one node
    distributed: bool = False
    # True when the engine builds a model_shape's random weights (cost benchmarks, trainer/embedded/shapes.py)
    model_shapes: bool = False
    # modules a worker imports before it forks its pool, so a run starts without importing them
    # (skipped when the engine's extra is not installed)
    preload: tuple[str, ...] = ()
    extra: str | None = None  # the pip extra that installs it, for error messages


ENGINE_SPECS: dict[str, EngineSpec] = {s.name: s for s in (
    EngineSpec("embedded", "the platform's own single-process trainer (CPU or one GPU; no extra installs)",
               run="trainer.embedded.loop:run_embedded", model_shapes=True,
               # transformers loads a model's modeling code at the first from_pretrained: the default's
               # (Qwen2) too, or each new pool process pays ~2 s of CPU for it at its first run
               preload=("transformers.models.qwen2.modeling_qwen2", "trainer.embedded.loop")),
    EngineSpec("verl", "verl 0.9.1's RayPPOTrainer (Ray, FSDP; vLLM or our HF rollout), for clusters and the CPU",
               run="trainer.verl:run_verl", rules="trainer.verl.rules:verl_issues", own_trackers=True,
               gpu_by_default=True, uses_ray=True, distributed=True, extra="verl"),
)}
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINE_SPECS)


def get_engine(name: str) -> EngineSpec:
    try:
        return ENGINE_SPECS[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINE_NAMES)}") from None


def engines_that(capability: str) -> tuple[str, ...]:
    """The engines whose spec says ``capability`` (a boolean field: ``distributed``...)."""
    return tuple(n for n, s in ENGINE_SPECS.items() if getattr(s, capability))


def preload_engines() -> list[str]:
    """Import what each installed engine asks a worker to preload (``EngineSpec.preload``);
    returns the modules imported."""
    import importlib

    done = []
    for spec in ENGINE_SPECS.values():
        try:
            for module in spec.preload:
                importlib.import_module(module)
                done.append(module)
        except ImportError:
            if spec.extra is None:
                raise  # the default engine must import
    return done
