"""The training loop: one readable loop for GRPO, DAPO and AERO (and its ablations).

    for step in 1..steps:
        collected <- collect(next batch_prompts problems)  # the method's step: rollouts, curation, advantages
        stats     <- updater.step(collected)               # clipped surrogate on variable-size groups
        log step metrics (time, rollouts, tokens, FLOPs, strata, savings); eval; checkpoint

Everything method-specific lives in trainer/methods/ (run through trainer/embedded/collect.py);
the math in trainer/core/. The update (model, optimizer, LR schedule, loss settings) is an
``Updater`` built once from the config (trainer/embedded/update.py); what a step hands the next
(RNGs, data position, step, method state) is a ``TrainingState`` (trainer/embedded/checkpoint.py),
which saves and resumes the run. A run resumes from OUT/checkpoints/latest and then reproduces,
step for step, the metrics of a run that never stopped (timings aside).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Generator

import numpy as np
import torch

import common.metric_keys as mk
from trainer.spec.config import ConfigError, RunConfig
from trainer.embedded.checkpoint import TrainingState
from trainer.embedded.collect import StepContext, collect, step_metrics
from trainer.embedded.memory_plan import plan_memory
from trainer.embedded.pipeline import AsyncSampler
from trainer.embedded.presets import Setup, load_setup
from trainer.embedded.update import Updater
from trainer.tasks.evaluate import eval_sampling, eval_seed, evaluate
from trainer.spec.operator_policy import RunPolicy
from trainer.rollout.base import SamplingParams
from trainer.platform.step_detail import SampleRules
from trainer.platform.sinks import MetricSink
from trainer.platform.system_metrics import SystemMonitor, device_gpus


def validate_lengths(cfg: RunConfig, model: torch.nn.Module) -> None:
    """Refuse prompt + response lengths past the model's context before any compute."""
    ctx = getattr(model.config, "max_position_embeddings", None)
    if ctx is not None and cfg.max_prompt_tokens + cfg.max_new_tokens > ctx:
        raise ConfigError([("max_new_tokens", f"max_prompt_tokens + max_new_tokens = "
                            f"{cfg.max_prompt_tokens + cfg.max_new_tokens} exceeds the model's context ({ctx})")])


def run_embedded(cfg: RunConfig, out_dir: str | Path, sink: MetricSink,
                 should_stop: Callable[[], bool] | None = None,
                 progress: Callable[[int, int, dict], None] | None = None,
                 policy: RunPolicy | None = None) -> dict[str, Any]:
    """The embedded engine's run (the contract in trainer/platform/run.py, whose ``run_training``
    calls it): train (or resume) one run to the end; ``progress(step, steps, metrics)`` after
    each step. ``policy`` is the operator's (trainer/spec/operator_policy.py): the code sandbox takes
    its isolation, interpreter and uid from it."""
    steps = iter_training(cfg, out_dir, sink, should_stop, policy)
    while True:
        try:
            step, total, metrics = next(steps)
        except StopIteration as done:
            return done.value
        if progress is not None:
            progress(step, total, metrics)


def due(step: int, every: int) -> bool:
    """Whether a periodic action (eval, checkpoint) falls on ``step``; ``every = 0`` means never."""
    return every > 0 and step % every == 0


def initial_state(cfg: RunConfig, setup: Setup) -> TrainingState:
    """Step 0 of a run: the updater built from the config and every RNG seeded from ``cfg.seed``.
    The memory plan (trainer/embedded/memory_plan.py) sets the update's micro-batch budget and the
    rows of one generate call, or refuses the config (ConfigError) before any compute."""
    plan = plan_memory(cfg, setup.model, setup.device, setup.compute_dtype)
    setup.memory_plan = plan
    if getattr(setup.sampler, "max_batch_rows", 0) is None:  # the hf sampler: generate in chunks that fit
        setup.sampler.max_batch_rows = plan.generate_rows
    updater = Updater.from_config(cfg, setup.model, pad_id=setup.task.tokenizer.pad_id, device=setup.device,
                                  micro_batch_tokens=plan.micro_batch_tokens)
    return TrainingState(updater=updater, sampling_rng=torch.Generator(device=setup.device).manual_seed(cfg.seed),
                         curation_rng=np.random.default_rng(cfg.seed))


def step_context(cfg: RunConfig, setup: Setup, state: TrainingState) -> StepContext:
    """What the method's step runs against; it shares the state's RNGs and method state, so
    the checkpoint sees every draw and update the step makes."""
    return StepContext(cfg=cfg, task=setup.task, sampler=setup.sampler,
                       sampling=SamplingParams(cfg.temperature, cfg.top_p, cfg.max_new_tokens),
                       gen=state.sampling_rng, rng=state.curation_rng, method_state=state.method_state)


def train_step(cfg: RunConfig, setup: Setup, ctx: StepContext, state: TrainingState) -> dict[str, float]:
    """One step: collect (the method's step), update, hand the new weights to the sampler.
    Advances the state's data position and elapsed time (not its step: the loop does, once the
    step is logged). Returns the step's metrics."""
    t0 = time.perf_counter()
    collected = collect(ctx, state.data_pos)
    for r in collected.generated:  # every row was sampled by the policy after state.step updates
        r.version = state.step
    state.data_pos += collected.prompts_used
    t1 = time.perf_counter()
    train_stats = {}
    if collected.train:  # DAPO may keep no group
        with setup.autocast():  # bf16 compute over fp32 master weights on CUDA; no-op on CPU
            train_stats = state.updater.step(collected.train, collected.advantages)
    setup.sampler.sync_weights(state.updater.model)
    t2 = time.perf_counter()
    state.elapsed_s += t2 - t0
    metrics = step_metrics(cfg, setup, collected, train_stats, time_collect=t1 - t0, time_train=t2 - t1,
                           extra_forwards=state.updater.extra_forwards)
    return {**metrics, "optim/lr": state.updater.lr, mk.ELAPSED_S: state.elapsed_s}


def train_step_async(cfg: RunConfig, setup: Setup, state: TrainingState, pipe: AsyncSampler, step: int
                     ) -> dict[str, float]:
    """One step of asynchronous training (trainer/embedded/pipeline.py): take the sampler's step,
    weight its rows back to the current policy when they are stale (trainer/core/importance.py),
    update, and publish the new version. The step's time is the trainer's wall clock: its wait
    for the sampler plus the update."""
    t0 = time.perf_counter()
    sampled, waited = pipe.take(step)
    collected, staleness = sampled.collected, step - 1 - sampled.version
    state.data_pos = sampled.data_pos + collected.prompts_used
    t1 = time.perf_counter()
    rows, weights, extra_forwards = collected.train, {}, state.updater.extra_forwards
    if rows and staleness > 0 and cfg.offpolicy.correction != "none":
        rows, weights = state.updater.with_proximal(rows)
        extra_forwards += 1  # the proximal forward over every trained token
    train_stats = {}
    if rows:
        with setup.autocast():
            train_stats = state.updater.step(rows, collected.advantages)
    pipe.publish(step)
    t2 = time.perf_counter()
    state.elapsed_s += t2 - t0
    metrics = step_metrics(cfg, setup, collected, train_stats, time_collect=t1 - t0, time_train=t2 - t1,
                           extra_forwards=extra_forwards)
    return {**metrics, **weights, "optim/lr": state.updater.lr, mk.ELAPSED_S: state.elapsed_s,
            mk.STALENESS_MEAN: float(staleness), mk.STALENESS_MAX: float(staleness),
            mk.SAMPLER_IDLE_S: sampled.waited_s, mk.TRAINER_IDLE_S: waited}


def iter_training(cfg: RunConfig, out_dir: str | Path, sink: MetricSink,
                  should_stop: Callable[[], bool] | None = None,
                  policy: RunPolicy | None = None) -> Generator[tuple[int, int, dict], None, dict]:
    """The loop itself, as a generator yielding (step, steps, metrics) after every step, so a
    benchmark can interleave several runs step by step on the same machine conditions."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    setup = load_setup(cfg, policy)
    validate_lengths(cfg, setup.model)
    state = initial_state(cfg, setup)
    if state.resume(out_dir):
        sink.truncate_after(state.step)  # steps past the checkpoint are re-run, and re-logged
    ctx = step_context(cfg, setup, state)
    ctx.sample_rules = SampleRules.from_policy(policy)  # the operator's rule for the stored rollout sample
    monitor = SystemMonitor(gpus=device_gpus(setup.device))  # system/* per step: CPU, RSS, the run's own GPU

    def run_eval(step: int) -> dict:
        results = evaluate(setup.sampler, setup.task, eval_sampling(cfg), cfg.eval_n, cfg.eval_problems,
                           seed=eval_seed(step), timeout_s=cfg.verifier_timeout_s)
        if results:  # a task without held-out sets (strata) logs no evaluation
            sink.log_eval(step, results)
        return results

    start, status = state.step, "completed"
    pipe = None
    if cfg.offpolicy.max_staleness > 0 and start < cfg.steps:  # the sampler runs ahead (trainer/spec/offpolicy.py)
        pipe = AsyncSampler(ctx, state.updater.model, start=start, steps=cfg.steps, data_pos=state.data_pos,
                            max_staleness=cfg.offpolicy.max_staleness)

    def checkpoint() -> None:
        sink.before_checkpoint(state.step)  # every step it covers is durable before it exists
        sampler = pipe.sampler_state(state.step) if pipe is not None else None
        sink.on_checkpoint(state.step, state.save(out_dir, keep=cfg.keep_checkpoints, sampler=sampler))

    try:
        if start == 0 and cfg.eval_every > 0:
            run_eval(0)
        yield from _steps(cfg, setup, ctx, state, pipe, sink, should_stop, monitor, run_eval, checkpoint)
        status = "stopped" if state.step < cfg.steps else "completed"
    finally:
        if pipe is not None:
            pipe.close()
    final_eval = run_eval(cfg.steps) if status == "completed" and start < cfg.steps else None
    if status == "stopped" or not due(state.step, cfg.checkpoint_every):  # the end is always resumable
        checkpoint()
    sink.close()
    return {"status": status, "last_step": state.step, "final_eval": final_eval, "n_params": setup.n_params,
            "data_pos": state.data_pos}


def _steps(cfg: RunConfig, setup: Setup, ctx: StepContext, state: TrainingState, pipe: AsyncSampler | None,
           sink: MetricSink, should_stop, monitor: SystemMonitor, run_eval, checkpoint
           ) -> Generator[tuple[int, int, dict], None, None]:
    """The steps of :func:`iter_training`: train, log, evaluate, checkpoint; stops early when
    ``should_stop()`` says so (``state.step`` then tells where)."""
    for step in range(state.step + 1, cfg.steps + 1):
        if should_stop is not None and should_stop():
            return
        if pipe is None:
            metrics = {**train_step(cfg, setup, ctx, state), **monitor.sample()}
            detail_of = ctx.detail
        else:
            metrics = {**train_step_async(cfg, setup, state, pipe, step), **monitor.sample()}
            detail_of = pipe.last_detail
        state.step = step
        sink.log(step, metrics)
        detail = detail_of() if detail_of is not None else None  # outside the step's timing
        if detail is not None:
            sink.log_detail(step, detail)
        if due(step, cfg.eval_every) and step != cfg.steps:  # the final eval runs below
            run_eval(step)
        if due(step, cfg.checkpoint_every):
            checkpoint()
        yield step, cfg.steps, metrics
