"""Side-by-side benchmark: GRPO, DAPO and AERO (and its ablations) from the same base
checkpoint and seed, in one process, on the same machine (`aero bench`).

Output schema (docs/bench.md): {"meta": {...}, "base_eval": {...}, "methods": {method: summary},
"ratios": {"aero/grpo": {field: ratio}, "aero/dapo": {...}}} where a summary holds per-step means
of cost fields and the final evaluation per benchmark.
"""

from __future__ import annotations

import platform
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from trainer.config import RunConfig, parse_run_config
from trainer.evaluate import evaluate
from trainer.loop import iter_training
from trainer.metrics import MemorySink
from trainer.presets import load_setup
from trainer.rollout.base import SamplingParams

MAIN_METHODS = ("grpo", "dapo", "aero")
ABLATIONS = ("aero-s1", "aero-s1s2")
# Per-step means reported for every method (metric key -> summary field).
COST_FIELDS = {
    "time/step_s": "step_s", "time/rollout_s": "rollout_s", "time/reward_s": "reward_s", "time/train_s": "train_s",
    "rollout/generated": "rollouts_generated", "rollout/trained": "rollouts_trained",
    "tokens/generated": "tokens_generated", "tokens/trained": "tokens_trained",
    "flops/rollout": "flops_rollout", "flops/train": "flops_train", "flops/total": "flops_total",
    "zero_acc/after_explore": "zero_acc_after_explore", "zero_acc/after_rescue": "zero_acc_after_rescue",
    "reward/mean": "reward_mean",
}


def summarize_run(sink: MemorySink, wall_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {field: float(np.nanmean(sink.series(key))) for key, field in COST_FIELDS.items()}
    out["wall_s"] = wall_s
    out["steps"] = len(sink.steps)
    final = sink.evals[max(sink.evals)] if sink.evals else {}
    out["eval"] = {name: {"avg_at_k": r["avg_at_k"], "pass_at_k": r["pass_at_k"], "avg_ci": r["avg_ci"]}
                   for name, r in final.items()}
    return out


def ratios(num: dict[str, Any], den: dict[str, Any]) -> dict[str, float]:
    """num/den for every shared numeric summary field, plus final overall Avg@k and Pass@k."""
    out = {f: num[f] / den[f] if den[f] else float("nan") for f in COST_FIELDS.values() if f in num and f in den}
    for key in ("avg_at_k", "pass_at_k"):
        a, b = num["eval"].get("overall", {}).get(key), den["eval"].get("overall", {}).get(key)
        if a is not None and b:
            out[f"final_{key}"] = a / b
    return out


def run_bench(preset: str = "tiny", steps: int = 60, seed: int = 0, methods: tuple[str, ...] = MAIN_METHODS,
              overrides: dict[str, Any] | None = None, out_dir: str | Path = "runs/bench",
              on_method: Callable[[str, RunConfig], Callable | None] | None = None) -> dict[str, Any]:
    """Train each method for ``steps`` from the preset's base checkpoint with the same seed,
    interleaved step by step in this process.

    ``overrides`` apply to every method (e.g. {"batch_prompts": 16}). Evaluation runs at the end
    only (eval_every=0) so eval cost does not enter the step times."""
    base = {"preset": preset, "steps": steps, "seed": seed, "eval_every": 0, "checkpoint_every": 0, **(overrides or {})}
    cfg0 = parse_run_config({**base, "method": "grpo"})
    setup = load_setup(cfg0)
    base_eval = evaluate(setup.engine, setup.task, SamplingParams(cfg0.temperature, cfg0.top_p, cfg0.max_new_tokens),
                         cfg0.eval_n, cfg0.eval_problems, seed=cfg0.seed + 7919 * steps, timeout_s=cfg0.verifier_timeout_s)
    runs = {}
    for method in methods:
        cfg = parse_run_config({**base, "method": method})
        run_dir = Path(out_dir) / method
        shutil.rmtree(run_dir, ignore_errors=True)  # a bench always trains from the base checkpoint
        sink = MemorySink()
        runs[method] = {"sink": sink, "gen": iter_training(cfg, run_dir, sink), "wall": 0.0,
                        "progress": on_method(method, cfg) if on_method else None}
    # Round-robin, one step of each method at a time: every method sees the same machine
    # conditions (other load, thermal state), so the ratios are fair even on a busy machine.
    live = list(methods)
    while live:
        for method in list(live):
            run = runs[method]
            t0 = time.perf_counter()
            try:
                step, total, metrics = next(run["gen"])
            except StopIteration:
                live.remove(method)
                continue
            finally:
                run["wall"] += time.perf_counter() - t0
            if run["progress"]:
                run["progress"](step, total, metrics)
    results = {m: summarize_run(r["sink"], r["wall"]) for m, r in runs.items()}
    report = {
        "meta": {"preset": preset, "steps": steps, "seed": seed, "overrides": overrides or {},
                 "machine": f"{platform.machine()} {platform.processor() or ''} {torch.get_num_threads()} threads".strip(),
                 "torch": torch.__version__, "n_params": setup.n_params,
                 "eval": {"k": cfg0.eval_n, "problems_per_benchmark": cfg0.eval_problems}},
        "base_eval": {n: {"avg_at_k": r["avg_at_k"], "pass_at_k": r["pass_at_k"]} for n, r in base_eval.items()},
        "methods": results,
        "ratios": {f"aero/{b}": ratios(results["aero"], results[b]) for b in ("grpo", "dapo")
                   if "aero" in results and b in results},
    }
    return report
