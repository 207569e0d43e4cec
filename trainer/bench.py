"""Side-by-side benchmark: GRPO, DAPO and AERO (and its ablations) from the same base
checkpoint and seed, in one process, on the same machine (`aero bench`).

Output schema (docs/bench.md): {"meta": {...}, "base_eval": {...}, "methods": {method: summary},
"ratios": {"aero/grpo": {field: ratio}, "aero/dapo": {...}, "dapo/grpo": ...}, "reach": {...}} where a summary holds
per-step means of cost fields, the final evaluation per benchmark and the eval curve, and
"reach" is the compute each method needs to reach fractions of GRPO's gain (trainer.core.reach).
``run_bench_seeds`` repeats it over seeds and summarises with confidence intervals.
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
from trainer.config import ConfigError, RunConfig, for_method, parse_run_config, unread_sections
from trainer.policy import RunPolicy
from trainer.core.reach import COSTS, ReachCurve, cumulative, final_accuracy, reach
from trainer.embedded.loop import iter_training
from trainer.methods.spec import baseline_method, method_names
from trainer.sinks import JsonlSink, MemorySink, MultiSink
from trainer.embedded.presets import PRESETS

MAIN_METHODS = ("grpo", "dapo", "aero")
ABLATIONS = ("aero-s1", "aero-s1s2")
# Per-step means reported for every method (metric key -> summary field).
COST_FIELDS = {
    mk.STEP_S: "step_s", mk.ROLLOUT_S: "rollout_s", mk.REWARD_S: "reward_s", mk.TRAIN_S: "train_s",
    mk.ROLLOUTS_GENERATED: "rollouts_generated", mk.ROLLOUTS_TRAINED: "rollouts_trained",
    mk.TOKENS_GENERATED: "tokens_generated", mk.TOKENS_TRAINED: "tokens_trained",
    mk.FLOPS_ROLLOUT: "flops_rollout", mk.FLOPS_TRAIN: "flops_train", mk.FLOPS_TOTAL: "flops_total",
    mk.ZERO_ACC_AFTER_EXPLORE: "zero_acc_after_explore", mk.ZERO_ACC_AFTER_RESCUE: "zero_acc_after_rescue",
    mk.REWARD_MEAN: "reward_mean",
}


def eval_curve(sink: MemorySink, key: str = "avg_at_k") -> dict[str, list]:
    """The run's overall held-out accuracy at each eval step, with cumulative training FLOPs
    and seconds (evaluation excluded) after that step: the x axes of the paper's headline."""
    steps = sorted(sink.evals)
    flops = cumulative(sorted(sink.steps), sink.series(mk.FLOPS_TOTAL))
    secs = {0: 0.0, **{s: m.get(mk.ELAPSED_S, float("nan")) for s, m in sink.steps.items()}}
    return {"steps": steps, key: [sink.evals[s][mk.OVERALL][key] for s in steps],
            "flops": [flops.get(s) for s in steps], "seconds": [secs.get(s) for s in steps]}


def reach_curve(curve: dict[str, list]) -> ReachCurve:
    return ReachCurve(curve["steps"], curve["avg_at_k"], {c: dict(zip(curve["steps"], curve[c])) for c in COSTS})


def summarize_run(sink: MemorySink, wall_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {field: float(np.nanmean(sink.series(key))) for key, field in COST_FIELDS.items()}
    out["wall_s"] = wall_s
    out["steps"] = len(sink.steps)
    final = sink.evals[max(sink.evals)] if sink.evals else {}
    out["eval"] = {name: {"avg_at_k": r["avg_at_k"], "pass_at_k": r["pass_at_k"], "avg_ci": r["avg_ci"]}
                   for name, r in final.items()}
    # Final accuracy robust to one noisy eval: the mean of the last WINDOW evals per benchmark.
    out["final_avg_at_k"] = {name: final_accuracy([sink.evals[s][name]["avg_at_k"] for s in sorted(sink.evals)])
                             for name in final}
    out["curve"] = eval_curve(sink) if sink.evals else None
    # The last evaluation's per-problem (n, c): the arena's paired test over problems (trainer/bench_arena.py).
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


def base_label(cfg: RunConfig) -> str:
    """What every method starts from, as a user would name it: the model directory, or the preset."""
    return cfg.model_path if cfg.model_path else f"preset {cfg.preset} ({PRESETS[cfg.preset]})"


def pair_ratios(results: dict[str, dict]) -> dict[str, dict]:
    """{"m/b": ratios(m, b)} for every pair of benched methods where b comes first in the
    methods' display order (GRPO, DAPO, AERO gives dapo/grpo, aero/grpo and aero/dapo)."""
    order = {name: i for i, name in enumerate(method_names())}
    ms = sorted(results, key=lambda m: order.get(m, len(order)))
    return {f"{m}/{b}": ratios(results[m], results[b]) for i, m in enumerate(ms) for b in ms[:i]}


def run_bench(preset: str | None = "tiny", steps: int = 60, seed: int = 0, methods: tuple[str, ...] = MAIN_METHODS,
              overrides: dict[str, Any] | None = None, out_dir: str | Path = "runs/bench",
              on_method: Callable[[str, RunConfig], Callable | None] | None = None) -> dict[str, Any]:
    """Train each method for ``steps`` from the same base checkpoint with the same seed,
    interleaved step by step in this process. Each method's run directory OUT/METHOD holds
    config.json, metrics.jsonl and evals.jsonl.

    ``overrides`` apply to every method (e.g. {"batch_prompts": 16}; a ``model_path`` replaces
    the preset). Evaluations run on the config's schedule (step 0 = the base, every
    eval_every steps, the end) at eval_temperature with draws paired across methods; their
    time is not in any step time."""
    overrides = dict(overrides or {})
    base = {"preset": None if overrides.get("model_path") else preset, "steps": steps, "seed": seed,
            "checkpoint_every": 0, **overrides}
    policy = RunPolicy.from_env()  # `aero bench` is the operator: caps and sandbox from AERO_* env
    if issues := unread_sections(base, methods):  # e.g. --set dapo.eps_high=... on a bench without DAPO
        raise ConfigError(issues)
    cfg0 = parse_run_config(for_method(base, methods[0]), policy)
    runs = {}
    for method in methods:
        cfg = parse_run_config(for_method(base, method), policy)  # each method keeps the sections it reads
        run_dir = Path(out_dir) / method
        shutil.rmtree(run_dir, ignore_errors=True)  # a bench always trains from the base checkpoint
        sink = MemorySink()
        runs[method] = {"sink": sink, "gen": iter_training(cfg, run_dir, MultiSink(sink, JsonlSink(run_dir)),
                                                             policy=policy),
                        "wall": 0.0, "progress": on_method(method, cfg) if on_method else None}
    # Round-robin, one step of each method at a time: every method sees the same machine
    # conditions (other load, thermal state), so the ratios are fair even on a busy machine.
    live = list(methods)
    while live:
        for method in list(live):
            run = runs[method]
            t0 = time.perf_counter()
            try:
                step, total, metrics = next(run["gen"])
            except StopIteration as done:
                run["result"] = done.value
                live.remove(method)
                continue
            finally:
                run["wall"] += time.perf_counter() - t0
            if run["progress"]:
                run["progress"](step, total, metrics)
    results = {m: summarize_run(r["sink"], r["wall"]) for m, r in runs.items()}
    # Every run evaluates the same base at step 0 with the same draws: any one's step 0 is the base.
    base_eval = next((r["sink"].evals[0] for r in runs.values() if 0 in r["sink"].evals), {})
    report = {
        "meta": {"preset": cfg0.preset, "base": base_label(cfg0), "steps": steps, "seed": seed,
                 "overrides": overrides, "config": cfg0.model_dump(mode="json", exclude={"method", "name"}),
                 "machine": f"{platform.machine()} {platform.processor() or ''} {torch.get_num_threads()} threads".strip(),
                 "torch": torch.__version__, "n_params": next(iter(runs.values()))["result"]["n_params"],
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
