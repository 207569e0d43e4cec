"""Cross-field rules of a run config that concern the model, the sampler, the method and the
engine (trainer/spec/config.py's ``cross_field_issues`` calls them): what a ``model_shape`` run
needs, what the chosen sampler can do (its spec, trainer/spec/sampler_registry.py), what the chosen
method's spec asks of the run, and the chosen engine's own rules (``EngineSpec.rules``). Each
returns (dotted field, message) pairs; nothing here imports the config module at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.refs import load
from trainer.spec.engine_registry import engines_that, get_engine
from trainer.methods.spec import get_method, specs
from trainer.spec.sampler_registry import either, get_sampler, samplers_that
from trainer.tasks.registry import get_task_spec, tasks_with

if TYPE_CHECKING:
    from trainer.spec.config import RunConfig


def shape_issues(cfg: RunConfig) -> list[tuple[str, str]]:
    """A ``model_shape`` run: random weights, a scripted task (strata), an engine that builds
    shapes (``EngineSpec.model_shapes``) and the HF sampler. A scripted task needs a shape (it has
    no tokenizer files) and a shape needs one."""
    scripted = get_task_spec(cfg.task).source == "scripted"
    if cfg.model_shape is None:
        return [("model_shape", f"the {cfg.task} task runs on a shipped architecture with random weights: set "
                 "model_shape (and preset=null)")] if scripted else []
    issues = []
    if cfg.preset is not None:
        issues.append(("preset", f"model_shape {cfg.model_shape} replaces the preset: set preset=null"))
    if cfg.model_path is not None:
        issues.append(("model_path", f"model_shape {cfg.model_shape} replaces model_path: remove it"))
    if not scripted:
        tasks = " or ".join(f"task={t}" for t in tasks_with("scripted"))
        issues.append(("task", f"a model_shape has random weights and no tokenizer: it trains a scripted task ({tasks})"))
    if not get_engine(cfg.engine).model_shapes:
        issues.append(("engine", f"a model_shape runs on the {' or '.join(engines_that('model_shapes'))} engine"))
    if get_sampler(cfg.rollout.sampler).from_model_dir:
        issues.append(("rollout.sampler", f"{get_sampler(cfg.rollout.sampler).label} loads its weights from a model directory and a "
                       f"model_shape has none: use {either(samplers_that('from_model_dir', False))}"))
    if get_method(cfg.method).needs.prompt_ids:
        issues.append(("method", f"method {cfg.method} keys its memory by prompt id; the strata task's prompts "
                       "never repeat"))
    return issues


def sampler_issues(cfg: RunConfig) -> list[tuple[str, str]]:
    """What the sampler's spec can do (trainer/spec/sampler_registry.py): a setting it would ignore, and so
    change the run's meaning without a word, is refused naming the field."""
    spec, issues = get_sampler(cfg.rollout.sampler), []
    if cfg.rollout.rng == "per-row" and not spec.keyed:
        keyed = samplers_that("keyed")
        issues.append(("rollout.rng", f"per-row keys are the {' or '.join(keyed)} sampler's; {spec.label} seeds each "
                       f"request its own way: set {either(keyed)}, or rollout.rng=stream"))
    if cfg.rollout.decode not in spec.decodes:
        honours = samplers_that("decodes", cfg.rollout.decode)
        issues.append(("rollout.decode", f"{spec.label} decodes its own way and would ignore rollout.decode="
                       f"{cfg.rollout.decode}: set rollout.decode=dynamic with rollout.sampler={cfg.rollout.sampler}"
                       + (f", or {either(honours)}" if honours else "")))
    elif cfg.device == "cpu" and cfg.rollout.decode in spec.cuda_decodes:
        issues.append(("rollout.decode", f"rollout.decode={cfg.rollout.decode} replays CUDA graphs; on device=cpu it "
                       "would run the fixed-shape step without them: set rollout.decode=static (the same tokens), or "
                       "device=cuda"))
    if cfg.rollout.schedule == "continuous":
        if not get_method(cfg.method).needs.streams:
            streaming = " or ".join(s.name for s in specs() if s.needs.streams)
            issues.append(("rollout.schedule", f"method {cfg.method} does not generate in rounds, so it would ignore "
                           f"rollout.schedule=continuous: set rollout.schedule=calls (continuous is {streaming}'s)"))
        if cfg.rollout.rng != "per-row":
            issues.append(("rollout.schedule", "a continuous batch samples each rollout from its own key: set "
                           "rollout.rng=per-row with rollout.schedule=continuous"))
        if not spec.stream:
            issues.append(("rollout.schedule", f"{spec.label} has no continuous batch: set "
                           f"{either(samplers_that('stream'))}, or rollout.schedule=calls"))
    return issues


def method_issues(cfg: RunConfig) -> list[tuple[str, str]]:
    """What the method's spec asks of the run (trainer/methods/spec.py): an engine that can run
    it, and stable prompt ids (on the arithmetic task, a finite ``train_size``), so a run that
    would fail at its first step is refused before any compute."""
    spec, issues = get_method(cfg.method), []
    if cfg.engine not in spec.needs.engines:
        issues.append(("engine", f"method {cfg.method} runs on the {' or '.join(spec.needs.engines)} engine; "
                       f"got {cfg.engine}"))
    for other in specs():  # one route per estimator: e.g. grpo with drgrpo's estimator is the drgrpo method
        if other.route_of == cfg.method and other.estimator == cfg.adv_estimator:
            keep = f" (with loss_agg={spec.loss_agg} to keep {cfg.method}'s loss aggregation)" \
                if other.loss_agg != spec.loss_agg and cfg.loss_agg is None else ""
            issues.append(("adv_estimator", f"method {cfg.method} with adv_estimator={cfg.adv_estimator} is the "
                           f"{other.name} method: set method={other.name}{keep}"))
    if spec.needs.prompt_ids and get_task_spec(cfg.task).source == "generated" and cfg.train_size is None:
        issues.append(("train_size", f"method {cfg.method} keys its memory by prompt id: set train_size (a finite "
                       f"{cfg.task} training set drawn in epochs)"))
    return issues


def engine_issues(cfg: RunConfig) -> list[tuple[str, str]]:
    """The run's engine's own submit-time rules (``EngineSpec.rules``, loaded when a run names the
    engine); empty for an engine without any."""
    spec = get_engine(cfg.engine)
    return list(load(spec.rules)(cfg)) if spec.rules else []
