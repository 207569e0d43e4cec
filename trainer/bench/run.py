"""Side-by-side benchmark: GRPO, DAPO and AERO (and its ablations) from the same base
checkpoint and seed, in one process, on the same machine (`aero bench`).

Output schema (docs/bench.md): {"meta": {...}, "base_eval": {...}, "methods": {method: summary},
"ratios": {"aero/grpo": {field: ratio}, "aero/dapo": {...}, "dapo/grpo": ...}, "reach": {...}} where a summary holds
per-step means of cost fields, the final evaluation per benchmark and the eval curve, and
"reach" is the compute each method needs to reach fractions of GRPO's gain (trainer.core.reach).
Every summary also holds the step's split and rates (:func:`rates`) and the method's peak memory
and update MFU (trainer/bench/device.py). ``run_bench_seeds`` repeats it over seeds and
summarises with confidence intervals.

``shape=NAME`` (`aero bench --shape`) benches a shipped architecture with random weights on the
scripted strata task (:data:`SHAPE_BASE`): the paper's step shape, real generation and real
updates, scripted rewards, so it measures cost and never learning.
"""

from __future__ import annotations

import platform
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

import common.metric_keys as mk
from common.dotted import merge
from trainer.bench.device import MethodMemory, device_name, peak_flops
from trainer.spec.config import ConfigError, RunConfig, for_method, parse_run_config, unread_sections
from trainer.spec.operator_policy import RunPolicy
from trainer.core.reach import COSTS, ReachCurve, cumulative, final_accuracy, reach
from trainer.embedded.loop import iter_training
from trainer.methods.spec import baseline_method, method_names
from trainer.platform.sinks import JsonlSink, MemorySink, MultiSink
from trainer.tasks.registry import get_task_spec
from trainer.embedded.presets import preset_dir, resolve_device

MAIN_METHODS = ("grpo", "dapo", "aero")
ABLATIONS = ("aero-s1", "aero-s1s2")
# Per-step means reported for every method (metric key -> summary field).
COST_FIELDS = {
    mk.STEP_S: "step_s", mk.ROLLOUT_S: "rollout_s", mk.REWARD_S: "reward_s", mk.TRAIN_S: "train_s",
    mk.ROLLOUTS_GENERATED: "rollouts_generated", mk.ROLLOUTS_TRAINED: "rollouts_trained",
    mk.TOKENS_GENERATED: "tokens_generated", mk.TOKENS_TRAINED: "tokens_trained",
    mk.FLOPS_ROLLOUT: "flops_rollout", mk.FLOPS_TRAIN: "flops_train", mk.FLOPS_TOTAL: "flops_total",
    mk.ZERO_ACC_AFTER_EXPLORE: "zero_acc_after_explore", mk.ZERO_ACC_AFTER_RESCUE: "zero_acc_after_rescue",
    mk.REWARD_MEAN: "reward_mean", mk.WASTE_FLOPS: "waste_flops", mk.WASTE_FLOPS_FRAC: "waste_flops_frac",
}


# `aero bench --shape NAME`: the paper's step (Table 9: prompts up to 1,024 tokens, responses up
# to 1,536, n = 16, activation checkpointing, lr 5e-6) at 128 prompts (Table 9's code batch; its
# math batch is 256: --set batch_prompts=256), no evaluation (the strata task holds nothing out)
# and no checkpoints. tiny-151k is the CPU shape: the same per-prompt budget on 4 prompts with
# short responses. `--set` overrides any of them.
SHAPE_BASE: dict[str, Any] = {"task": "strata", "preset": None, "batch_prompts": 128, "n_total": 16,
                              "max_new_tokens": 1536, "max_prompt_tokens": 1024, "gradient_checkpointing": True,
                              "eval_every": 0, "checkpoint_every": 0, "optim": {"lr": 5e-6}}
SHAPE_DEFAULTS: dict[str, dict[str, Any]] = {"tiny-151k": {"batch_prompts": 4, "max_new_tokens": 64,
                                                           "max_prompt_tokens": 128, "gradient_checkpointing": False}}
SHAPE_STEPS = 3
SHAPE_WARMUP_STEPS = 1  # a shape bench's per-step means leave out its first step (device warm-up)
SCRIPTED = "scripted (the strata task); no learning is measured"


def bench_base(preset: str | None, shape: str | None, steps: int, seed: int, overrides: dict[str, Any]) -> dict[str, Any]:
    """The config every benched method shares, before ``for_method``."""
    if shape is not None:
        return merge({**SHAPE_BASE, **SHAPE_DEFAULTS.get(shape, {}), "model_shape": shape, "steps": steps, "seed": seed},
                     overrides)
    return {"preset": None if overrides.get("model_path") else preset, "steps": steps, "seed": seed,
            "checkpoint_every": 0, **overrides}


def rates(summary: dict[str, Any], peak: float | None) -> dict[str, float | None]:
    """A summary's step split and rates: other seconds (the step less generation and update:
    scoring, curation, bookkeeping), tokens per second of generation and of the update, and the
    update's MFU against the device's ``peak`` FLOP/s (None without one)."""
    def per(a: str, b: str) -> float | None:
        return summary[a] / summary[b] if summary.get(b) else None

    train_flops_per_s = per("flops_train", "train_s")
    return {"other_s": summary["step_s"] - summary["rollout_s"] - summary["train_s"],
            "generate_tokens_per_s": per("tokens_generated", "rollout_s"),
            "train_tokens_per_s": per("tokens_trained", "train_s"),
            "train_flops_per_s": train_flops_per_s,
            "mfu": train_flops_per_s / peak if peak and train_flops_per_s is not None else None}


def eval_curve(sink: MemorySink, key: str = "avg_at_k") -> dict[str, list]:
    """The run's overall held-out accuracy at each eval step, with cumulative training FLOPs
    and seconds (evaluation excluded), rollouts and response tokens generated after that step:
    the x axes of the paper's headline and of the rollouts-to-target view."""
    steps = sorted(sink.evals)
    costs = {name: cumulative(sorted(sink.steps), sink.series(key))
             for name, key in (("flops", mk.FLOPS_TOTAL), ("rollouts", mk.ROLLOUTS_GENERATED),
                               ("tokens", mk.TOKENS_GENERATED))}
    costs["seconds"] = {0: 0.0, **{s: m.get(mk.ELAPSED_S, float("nan")) for s, m in sink.steps.items()}}
    return {"steps": steps, key: [sink.evals[s][mk.OVERALL][key] for s in steps],
            **{c: [costs[c].get(s) for s in steps] for c in COSTS}}


def reach_curve(curve: dict[str, list]) -> ReachCurve:
    return ReachCurve(curve["steps"], curve["avg_at_k"], {c: dict(zip(curve["steps"], curve[c])) for c in COSTS})


def summarize_run(sink: MemorySink, wall_s: float, warmup: int = 0) -> dict[str, Any]:
    """Per-step means of the cost fields over the steps after the first ``warmup`` (all steps when
    there are no more), the final evaluation and the eval curve."""
    def mean(key: str) -> float:
        series = sink.series(key)
        return float(np.nanmean(series[warmup:] if len(series) > warmup else series))

    out: dict[str, Any] = {field: mean(key) for key, field in COST_FIELDS.items()}
    out["first_step_s"] = sink.series(mk.STEP_S)[0] if sink.steps else float("nan")
    out["wall_s"] = wall_s
    out["steps"] = len(sink.steps)
    final = sink.evals[max(sink.evals)] if sink.evals else {}
    out["eval"] = {name: {"avg_at_k": r["avg_at_k"], "pass_at_k": r["pass_at_k"], "avg_ci": r["avg_ci"]}
                   for name, r in final.items()}
    # Final accuracy robust to one noisy eval: the mean of the last WINDOW evals per benchmark.
    out["final_avg_at_k"] = {name: final_accuracy([sink.evals[s][name]["avg_at_k"] for s in sorted(sink.evals)])
                             for name in final}
    out["curve"] = eval_curve(sink) if sink.evals else None
    # The last evaluation's per-problem (n, c): the arena's paired test over problems (trainer/bench/arena.py).
    out["last_per_problem"] = {name: r["per_problem"] for name, r in final.items() if r.get("per_problem")}
    return out


def ratios(num: dict[str, Any], den: dict[str, Any]) -> dict[str, float]:
    """num/den for every shared numeric summary field, plus final overall Avg@k and Pass@k."""
    out = {f: num[f] / den[f] if den[f] else float("nan") for f in COST_FIELDS.values() if f in num and f in den}
    for key in mk.EVAL_METRICS:
        a, b = num["eval"].get(mk.OVERALL, {}).get(key), den["eval"].get(mk.OVERALL, {}).get(key)
        if a is not None and b:
            out[f"final_{key}"] = a / b
    return out


def method_summary(run: dict[str, Any], peak: float | None, warmup: int = 0) -> dict[str, Any]:
    """A benched method's summary: per-step means (after ``warmup`` steps), rates and MFU, peak memory."""
    summary = summarize_run(run["sink"], run["wall"], warmup)
    return {**summary, **rates(summary, peak), **run["memory"].summary()}


def shape_params(shape: str | None) -> int | None:
    from trainer.embedded.shapes import shape_parameters

    return shape_parameters(shape) if shape else None


def base_label(cfg: RunConfig) -> str:
    """What every method starts from, as a user would name it: the model directory, the shape, or the preset."""
    if cfg.model_shape:
        return f"shape {cfg.model_shape} (random weights, seed {cfg.seed})"
    return cfg.model_path if cfg.model_path else f"preset {cfg.preset} ({preset_dir(cfg.preset)})"


def pair_ratios(results: dict[str, dict]) -> dict[str, dict]:
    """{"m/b": ratios(m, b)} for every pair of benched methods where b comes first in the
    methods' display order (GRPO, DAPO, AERO gives dapo/grpo, aero/grpo and aero/dapo)."""
    order = {name: i for i, name in enumerate(method_names())}
    ms = sorted(results, key=lambda m: order.get(m, len(order)))
    return {f"{m}/{b}": ratios(results[m], results[b]) for i, m in enumerate(ms) for b in ms[:i]}


def run_bench(preset: str | None = "tiny", steps: int = 60, seed: int = 0, methods: tuple[str, ...] = MAIN_METHODS,
              overrides: dict[str, Any] | None = None, out_dir: str | Path = "runs/bench",
              on_method: Callable[[str, RunConfig], Callable | None] | None = None,
              shape: str | None = None) -> dict[str, Any]:
    """Train each method for ``steps`` from the same base checkpoint with the same seed,
    interleaved step by step in this process. Each method's run directory OUT/METHOD holds
    config.json, metrics.jsonl and evals.jsonl.

    ``overrides`` apply to every method (e.g. {"batch_prompts": 16}; a ``model_path`` replaces
    the preset). Evaluations run on the config's schedule (step 0 = the base, every
    eval_every steps, the end) at eval_temperature with draws paired across methods; their
    time is not in any step time. ``shape`` benches a shipped architecture with random weights
    on the strata task instead (:data:`SHAPE_BASE`; ``preset`` is then unused): each run stops
    after its last step, without the end-of-run checkpoint (a 1.5B model's weights and AdamW
    state are ~18 GB a method)."""
    overrides = dict(overrides or {})
    base = bench_base(preset, shape, steps, seed, overrides)
    policy = RunPolicy.from_env()  # `aero bench` is the operator: caps and sandbox from AERO_* env
    if issues := unread_sections(base, methods):  # e.g. --set dapo.eps_high=... on a bench without DAPO
        raise ConfigError(issues)
    cfg0 = parse_run_config(for_method(base, methods[0]), policy)
    device = resolve_device(cfg0)[0]
    runs = {}
    for method in methods:
        cfg = parse_run_config(for_method(base, method), policy)  # each method keeps the sections it reads
        run_dir = Path(out_dir) / method
        shutil.rmtree(run_dir, ignore_errors=True)  # a bench always trains from the base checkpoint
        sink = MemorySink()
        runs[method] = {"sink": sink, "gen": iter_training(cfg, run_dir, MultiSink(sink, JsonlSink(run_dir)),
                                                             policy=policy),
                        "wall": 0.0, "progress": on_method(method, cfg) if on_method else None,
                        "memory": MethodMemory(device)}
    # Round-robin, one step of each method at a time: every method sees the same machine
    # conditions (other load, thermal state), so the ratios are fair even on a busy machine.
    live = list(methods)
    while live:
        for method in list(live):
            run = runs[method]
            t0 = time.perf_counter()
            run["memory"].begin()
            try:
                step, total, metrics = next(run["gen"])
            except StopIteration as done:
                run["result"] = done.value
                live.remove(method)
                continue
            finally:
                run["wall"] += time.perf_counter() - t0
            run["memory"].end()
            if run["progress"]:
                run["progress"](step, total, metrics)
            if shape is not None and step == total:  # nothing left but the end-of-run checkpoint
                run["gen"].close()
                live.remove(method)
    peak = peak_flops(device)
    # A shape bench's first step pays the device's warm-up (on one H200: ~70 s of GRPO's 141 s,
    # the allocator growing the KV cache and first launches), so its means start at step 2.
    warmup = SHAPE_WARMUP_STEPS if shape is not None and steps > SHAPE_WARMUP_STEPS else 0
    results = {m: method_summary(r, peak, warmup) for m, r in runs.items()}
    # Every run evaluates the same base at step 0 with the same draws: any one's step 0 is the base.
    base_eval = next((r["sink"].evals[0] for r in runs.values() if 0 in r["sink"].evals), {})
    n_params = next((r["result"]["n_params"] for r in runs.values() if "result" in r), None)
    report = {
        "meta": {"preset": cfg0.preset, "shape": cfg0.model_shape, "base": base_label(cfg0), "steps": steps, "seed": seed,
                 "overrides": overrides, "config": cfg0.model_dump(mode="json", exclude={"method", "name"}),
                 "machine": f"{platform.machine()} {platform.processor() or ''} {torch.get_num_threads()} threads".strip(),
                 "torch": torch.__version__, "n_params": n_params if n_params is not None else shape_params(shape),
                 "device": device_name(device), "peak_flops": peak,
                 "rewards": SCRIPTED if get_task_spec(cfg0.task).source == "scripted" else "verified",
                 "warmup_steps_excluded": warmup,
                 "eval": {"k": cfg0.eval_n, "problems_per_benchmark": cfg0.eval_problems, "every": cfg0.eval_every,
                          "temperature": cfg0.eval_temperature}},
        "base_eval": {n: {"avg_at_k": r["avg_at_k"], "pass_at_k": r["pass_at_k"]} for n, r in base_eval.items()},
        "methods": results,
        "ratios": pair_ratios(results),
    }
    base = baseline_method()
    if base in results and all(r["curve"] for r in results.values()):
        report["reach"] = reach({m: reach_curve(r["curve"]) for m, r in results.items()}, baseline=base)
    return report
