"""The verl engine's own submit-time rules (registered in trainer/spec/engine_registry.py), checked with
the config so the API refuses them at submit instead of the worker failing later. Light: no
verl import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.methods.spec import get_method
from trainer.spec.sampler_registry import get_sampler, samplers_that
from trainer.tasks.registry import TASK_SPECS, get_task_spec

if TYPE_CHECKING:
    from trainer.spec.config import RunConfig


def verl_issues(cfg: RunConfig) -> list[tuple[str, str]]:
    """The verl engine's own rules, checked here so the API refuses them at submit instead of
    the worker failing later. Whether ``model_path`` holds a model is the worker's check
    (trainer/verl/runner.py): the API never says whether a path exists."""
    issues, task = [], get_task_spec(cfg.task)
    if "verl" not in task.engines:
        on_verl = [n for n, s in TASK_SPECS.items() if "verl" in s.engines]
        issues.append(("task", f"the verl engine trains the {', '.join(on_verl)} tasks; {cfg.task} runs on the "
                       "embedded engine"))
    if cfg.model_path is not None and task.source == "generated":
        issues.append(("task", f"a model_path run on verl trains a file task (the {cfg.task} task's char tokenizer "
                       f"ships with the {task.preset} preset)"))
    if cfg.mini_batches > 1 and cfg.shuffle_mini_batches:
        issues.append(("shuffle_mini_batches", "the verl engine lays mini-batches out in generation order (the "
                       "embedded engine reshuffles them each epoch): set shuffle_mini_batches=false with "
                       f"mini_batches={cfg.mini_batches} on verl"))
    if cfg.mini_batches <= cfg.batch_prompts and cfg.batch_prompts % cfg.mini_batches:
        issues.append(("mini_batches", f"batch_prompts ({cfg.batch_prompts}) must be a multiple of mini_batches "
                       f"on verl; got {cfg.mini_batches}"))
    if not cfg.std_unbiased and get_method(cfg.method).verl.stock_fit and get_method(cfg.method).divides_by_std(cfg):
        issues.append(("std_unbiased", f"method {cfg.method} runs verl's own GRPO estimator on verl, which divides by "
                       "the Bessel-corrected group std; keep std_unbiased=true (or train it on the embedded engine)"))
    if cfg.packed_update == "on" and cfg.device != "cuda":
        issues.append(("packed_update", "verl packs the update (use_remove_padding) with flash-attention's varlen "
                       "kernels, on CUDA only, and pads on the CPU: set device=cuda with packed_update=on on verl, "
                       "or packed_update=auto"))
    if cfg.rollout.decode != "dynamic":
        issues.append(("rollout.decode", "verl's rollout servers decode dynamically: rollout.decode=dynamic on verl "
                       "(static and graphs are the embedded engine's)"))
    if cfg.rollout.rng != "stream":
        issues.append(("rollout.rng", "verl's rollout servers draw from their own generators: rollout.rng=stream on "
                       "verl (per-row keys, and with them rollout.schedule=continuous, are the embedded engine's)"))
    if cfg.offpolicy.max_staleness > 0:
        issues.append(("offpolicy.max_staleness", "asynchronous training is the embedded engine's: verl 0.9.1's "
                       "one_step_off_policy and fully_async_policy trainers split the GPUs into a rollout pool and a "
                       "training pool and run verl's own loop, not the methods' curated steps (docs/engines.md): set "
                       "offpolicy.max_staleness=0 on verl, or engine=embedded"))
    if cfg.device == "cpu" and "cpu" not in get_sampler(cfg.rollout.sampler).devices:
        cpu = " or ".join(f"'{n}'" for n in samplers_that("devices", "cpu"))
        issues.append(("rollout.sampler", f"{get_sampler(cfg.rollout.sampler).label} needs CUDA; on the CPU the verl engine rolls out "
                       f"with {cpu} (docs/engines.md)"))
    return issues
