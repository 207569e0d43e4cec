"""`aero bench --seeds 0,1,2`: the side-by-side benchmark repeated over seeds and summarised
with confidence intervals (a claim about learning needs several seeds).

Each seed is one ``run_bench`` (all methods interleaved step by step from the same base), in
OUT/seed<S>/<method>. The summary gives, per method, the mean and a Student-t 95% interval
across seeds of every per-step cost, of the final accuracy (mean of the last 3 evals) and of
its gain over the base per benchmark; ratios to GRPO paired by seed; and the compute each
method needs to reach fractions of GRPO's gain (trainer.core.reach); and the arena's
leaderboard (trainer/bench/arena.py), one row per method against GRPO.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import common.metric_keys as mk
from trainer.bench.arena import leaderboard
from trainer.bench.run import COST_FIELDS, run_bench
from trainer.core.reach import reach_across_seeds
from trainer.core.stats import mean_ci, paired_ratios
from trainer.methods.spec import baseline_method

BASELINE = baseline_method()


def run_bench_seeds(seeds: Sequence[int], out_dir: str | Path = "runs/bench", **kw: Any) -> dict[str, Any]:
    """``run_bench`` for each seed (same methods, overrides and steps), then ``summarize_seeds``."""
    reports = [run_bench(seed=s, out_dir=Path(out_dir) / f"seed{s}", **kw) for s in seeds]
    meta = {**reports[0]["meta"], "seeds": list(seeds)}
    meta.pop("seed", None)
    return {"meta": meta, "summary": summarize_seeds(reports), "seeds": reports}


def _gain(report: dict[str, Any], method: str, bench: str) -> float | None:
    final = report["methods"][method]["final_avg_at_k"].get(bench)
    base = report["base_eval"].get(bench, {}).get("avg_at_k")
    return None if final is None or base is None else final - base


def summarize_seeds(reports: Sequence[dict[str, Any]], alpha: float = 0.05) -> dict[str, Any]:
    """Mean ± CI across seeds of each method's costs, final accuracy and gain per benchmark;
    ratios to GRPO paired by seed; compute to reach GRPO's gain across seeds."""
    methods = list(reports[0]["methods"])
    benches = list(reports[0]["methods"][methods[0]]["final_avg_at_k"])
    out: dict[str, Any] = {"seeds": len(reports), "methods": {}, "ratios": {},
                           "base_eval": {b: mean_ci([r["base_eval"].get(b, {}).get("avg_at_k") for r in reports], alpha)
                                         for b in benches}}
    for m in methods:
        runs = [r["methods"][m] for r in reports]
        out["methods"][m] = {
            **{f: mean_ci([run[f] for run in runs], alpha) for f in COST_FIELDS.values()},
            "final_avg_at_k": {b: mean_ci([run["final_avg_at_k"].get(b) for run in runs], alpha) for b in benches},
            "gain": {b: mean_ci([_gain(r, m, b) for r in reports], alpha) for b in benches},
        }
    if BASELINE in methods:
        for m in methods:
            if m == BASELINE:
                continue
            pairs = [(r["methods"][m], r["methods"][BASELINE]) for r in reports]
            out["ratios"][f"{m}/{BASELINE}"] = {
                **{f: paired_ratios([(a[f], b[f]) for a, b in pairs], alpha) for f in COST_FIELDS.values()},
                "final_diff": mean_ci([None if a["final_avg_at_k"].get(mk.OVERALL) is None
                                       else a["final_avg_at_k"][mk.OVERALL] - b["final_avg_at_k"][mk.OVERALL]
                                       for a, b in pairs], alpha),
            }
        if all("reach" in r for r in reports):
            out["reach"] = reach_across_seeds([r["reach"] for r in reports], BASELINE, alpha)
    out["leaderboard"] = leaderboard(reports, out, BASELINE if BASELINE in methods else None, alpha)
    return out
