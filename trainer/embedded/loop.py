"""The training loop: one readable loop for GRPO, DAPO and AERO (and its ablations).

    for step in 1..steps:
        problems  <- next batch_prompts problems of the seeded training stream
        collected <- collect(problems)              # the method's step: rollouts, curation, advantages
        stats     <- policy_update(collected)       # clipped surrogate on variable-size groups
        log step metrics (time, rollouts, tokens, FLOPs, strata, savings); eval; checkpoint

Everything method-specific lives in trainer/methods/ (run through trainer/embedded/collect.py); the math in
trainer/core/.
A run resumes from OUT/checkpoints/latest and then reproduces, step for step, the metrics
of a run that never stopped (timings aside).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any, Callable, Generator

import numpy as np
import torch

import common.metric_keys as mk
from trainer.config import ConfigError, RunConfig
from trainer.core.losses import Aggregation
from trainer.embedded.checkpoint import load_latest_checkpoint, numpy_rng_from_state, numpy_rng_state, save_checkpoint
from trainer.embedded.collect import StepContext, collect, step_metrics
from trainer.embedded.presets import load_setup
from trainer.embedded.update import policy_update, warmup_constant_lr, warmup_length
from trainer.evaluate import eval_sampling, eval_seed, evaluate
from trainer.methods.spec import get_method
from trainer.policy import RunPolicy
from trainer.rollout.base import SamplingParams
from trainer.sinks import MetricSink


def validate_lengths(cfg: RunConfig, model: torch.nn.Module) -> None:
    """Refuse prompt + response lengths past the model's context before any compute."""
    ctx = getattr(model.config, "max_position_embeddings", None)
    if ctx is not None and cfg.max_prompt_tokens + cfg.max_new_tokens > ctx:
        raise ConfigError([("max_new_tokens", f"max_prompt_tokens + max_new_tokens = "
                            f"{cfg.max_prompt_tokens + cfg.max_new_tokens} exceeds the model's context ({ctx})")])


def run_training(cfg: RunConfig, out_dir: str | Path, sink: MetricSink,
                 should_stop: Callable[[], bool] | None = None,
                 progress: Callable[[int, int, dict], None] | None = None,
                 policy: RunPolicy | None = None) -> dict[str, Any]:
    """Train (or resume) one run to the end; ``progress(step, steps, metrics)`` after each step.
    Returns {"status": "completed" | "stopped", "last_step", "final_eval", ...}.
    Runs with engine "verl" go to the verl backend (same contract; extra ``verl``).
    ``cfg`` was parsed once, at the boundary (``parse_run_config(data, policy)``: the API, the
    worker, the CLI); ``policy`` is the operator's (trainer/policy.py): the code sandbox takes its
    isolation, interpreter and uid from it."""
    if cfg.engine == "verl":
        from trainer.verl import run_verl

        return run_verl(cfg, out_dir, sink, should_stop=should_stop, progress=progress)
    steps = iter_training(cfg, out_dir, sink, should_stop, policy)
    while True:
        try:
            step, total, metrics = next(steps)
        except StopIteration as done:
            return done.value
        if progress is not None:
            progress(step, total, metrics)


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
    model, task = setup.model, setup.task
    ref_model = copy.deepcopy(model).eval().requires_grad_(False) if cfg.kl_coef > 0 else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr, betas=(cfg.optim.beta1, cfg.optim.beta2),
                                  weight_decay=cfg.optim.weight_decay)
    per_step = cfg.ppo_epochs * cfg.mini_batches
    warmup = warmup_length(cfg.steps * per_step, cfg.optim.warmup_ratio, cfg.optim.warmup_steps, per_step)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_constant_lr(s, warmup))
    gen = torch.Generator(device=setup.device).manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    start_step, data_pos, elapsed = 0, 0, 0.0

    ckpt = load_latest_checkpoint(out_dir)
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        gen.set_state(ckpt["sampling_rng"])
        rng = numpy_rng_from_state(ckpt["curation_rng"])
        if ref_model is not None:
            ref_model.load_state_dict(ckpt["ref_model"])
        start_step, data_pos, elapsed = ckpt["step"], ckpt["data_pos"], ckpt.get("elapsed_s", 0.0)
        sink.truncate_after(start_step)

    sampling = SamplingParams(cfg.temperature, cfg.top_p, cfg.max_new_tokens)
    ctx = StepContext(cfg=cfg, task=task, engine=setup.engine, sampling=sampling, gen=gen, rng=rng,
                      method_state=dict(ckpt.get("method_state") or {}) if ckpt is not None else {})
    eps_low, eps_high = get_method(cfg.method).clip_range(cfg)  # DAPO: clip-higher

    def checkpoint(step: int) -> None:
        sink.before_checkpoint(step)  # every step it covers is durable before it exists
        path = save_checkpoint(out_dir, step, {
            "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "sampling_rng": gen.get_state(), "curation_rng": numpy_rng_state(ctx.rng), "data_pos": data_pos,
            "elapsed_s": elapsed, "ref_model": ref_model.state_dict() if ref_model is not None else None,
            "method_state": ctx.method_state})
        sink.on_checkpoint(step, path)

    def run_eval(step: int) -> dict:
        results = evaluate(setup.engine, task, eval_sampling(cfg), cfg.eval_n, cfg.eval_problems, seed=eval_seed(step),
                           timeout_s=cfg.verifier_timeout_s)
        sink.log_eval(step, results)
        return results

    if start_step == 0 and cfg.eval_every > 0:
        run_eval(0)
    status, step = "completed", start_step
    for step in range(start_step + 1, cfg.steps + 1):
        if should_stop is not None and should_stop():
            status, step = "stopped", step - 1
            break
        t0 = time.perf_counter()
        collected = collect(ctx, data_pos)
        data_pos += collected.prompts_used
        t1 = time.perf_counter()
        train_stats = {}
        if collected.train:
            with setup.autocast():  # bf16 compute over fp32 master weights on CUDA; no-op on CPU
                train_stats = policy_update(
                    model, optimizer, scheduler, collected.train, collected.advantages, pad_id=task.tokenizer.pad_id,
                    temperature=cfg.temperature, eps_low=eps_low, eps_high=eps_high,
                    agg=Aggregation(cfg.effective_loss_agg, max_len=cfg.max_new_tokens),
                    entropy_coef=cfg.entropy_coef, kl_coef=cfg.kl_coef, ref_model=ref_model, grad_clip=cfg.optim.grad_clip,
                    epochs=cfg.ppo_epochs, mini_batches=cfg.mini_batches, device=setup.device)
        setup.engine.sync_weights(model)
        t2 = time.perf_counter()
        elapsed += t2 - t0
        metrics = step_metrics(cfg, setup, collected, train_stats, time_collect=t1 - t0, time_train=t2 - t1,
                               extra_forwards=1 if ref_model is not None else 0)
        metrics["optim/lr"] = optimizer.param_groups[0]["lr"]
        metrics[mk.ELAPSED_S] = elapsed
        sink.log(step, metrics)
        if cfg.eval_every > 0 and step % cfg.eval_every == 0 and step != cfg.steps:
            run_eval(step)
        if cfg.checkpoint_every > 0 and step % cfg.checkpoint_every == 0:
            checkpoint(step)
        yield step, cfg.steps, metrics
    final_eval = None
    if status == "completed" and step == cfg.steps and start_step < cfg.steps:
        final_eval = run_eval(cfg.steps)
    if status == "completed" and (cfg.checkpoint_every == 0 or step % cfg.checkpoint_every != 0):
        checkpoint(step)
    elif status == "stopped":
        checkpoint(step)
    sink.close()
    return {"status": status, "last_step": step, "final_eval": final_eval, "n_params": setup.n_params,
            "data_pos": data_pos}
