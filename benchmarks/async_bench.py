"""Asynchronous training measured (issue: does AERO's saving hold off-policy?): each method at
``offpolicy.max_staleness`` k = 0 (synchronous), 1 and 2, on the same seeds, from the same base.

    python benchmarks/async_bench.py --seeds 0,1,2 --steps 40 --out runs/async_bench
    python benchmarks/async_bench.py --seeds 0 --steps 6 --methods grpo --ks 0,1 --set batch_prompts=16   # a smoke run
    python benchmarks/async_bench.py --ks 0,4,4:mis   # k = 4 under tis (the default) and under mis, side by side

Per run: the trainer's wall clock per step (median over steps 2.., ``time/step_s``), where the
time goes (rollout, update, the sampler's and the trainer's waits), staleness and importance
weights, and the held-out accuracy curve. Across seeds: final accuracy (mean of the last 3 evals)
with a Student-t 95% interval, and the FLOPs and seconds each run needs to reach fractions of
synchronous GRPO's gain (trainer/core/reach.py), paired by seed.

The runs of one seed go one after another, not interleaved step by step as ``aero bench`` does:
an asynchronous run's sampler thread keeps sampling while its generator is suspended, so an
interleaved neighbour would be timed under its load. The order of the runs rotates with the
seed, so no k always runs first on a warm or cold machine. Nothing else may run on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common.metric_keys as mk  # noqa: E402
from trainer.bench.run import eval_curve, reach_curve  # noqa: E402
from trainer.spec.config import for_method, parse_run_config  # noqa: E402
from trainer.core.reach import final_accuracy, reach, reach_across_seeds  # noqa: E402
from trainer.core.stats import mean_ci  # noqa: E402
from trainer.embedded.loop import iter_training  # noqa: E402
from trainer.platform.sinks import MemorySink  # noqa: E402

PHASES = (mk.STEP_S, mk.ROLLOUT_S, mk.TRAIN_S, mk.SAMPLER_IDLE_S, mk.TRAINER_IDLE_S)


def name_of(method: str, k: int, correction: str | None = None) -> str:
    return f"{method}@k{k}" + (f"-{correction}" if correction else "")


def parse_variant(item: str) -> tuple[int, str | None]:
    """``--ks`` entries: ``K`` (the configured correction) or ``K:CORRECTION`` (``4:mis``)."""
    k, _, correction = item.partition(":")
    return int(k), correction or None


def run_one(base: dict[str, Any], method: str, k: int, seed: int, out: Path,
            correction: str | None = None) -> dict[str, Any]:
    offpolicy = {**base.get("offpolicy", {}), "max_staleness": k}  # --set offpolicy.correction=... kept
    if correction:
        offpolicy["correction"] = correction
    cfg = parse_run_config(for_method({**base, "seed": seed, "offpolicy": offpolicy}, method))
    sink = MemorySink()
    t0 = time.perf_counter()
    for _ in iter_training(cfg, out / f"seed{seed}" / name_of(method, k, correction), sink):
        pass
    wall = time.perf_counter() - t0
    later = [s for s in sorted(sink.steps) if s >= 2] or sorted(sink.steps)

    def median(key: str) -> float | None:
        vals = [sink.steps[s][key] for s in later if key in sink.steps[s]]
        return statistics.median(vals) if vals else None

    curve = eval_curve(sink)
    return {"name": name_of(method, k, correction), "method": method, "k": k, "correction": correction,
            "seed": seed, "wall_s": wall,
            "median": {key: median(key) for key in (*PHASES, mk.STALENESS_MAX, mk.IS_WEIGHT_MEAN, mk.IS_CAPPED_FRAC)},
            "flops_total": sum(m[mk.FLOPS_TOTAL] for m in sink.steps.values()),
            "train_s": sink.steps[max(sink.steps)][mk.ELAPSED_S],
            "final_avg_at_k": final_accuracy(curve["avg_at_k"]), "curve": curve}


def summarize(results: list[dict[str, Any]], baseline: str) -> dict[str, Any]:
    names = sorted({r["name"] for r in results})
    seeds = sorted({r["seed"] for r in results})
    by = {(r["name"], r["seed"]): r for r in results}
    out: dict[str, Any] = {"runs": {}}
    for n in names:
        rs = [by[(n, s)] for s in seeds if (n, s) in by]
        out["runs"][n] = {
            "step_s_median": mean_ci([r["median"][mk.STEP_S] for r in rs]),
            **{f"{key}_median": mean_ci([r["median"][key] for r in rs]) for key in PHASES[1:]},
            "final_avg_at_k": mean_ci([r["final_avg_at_k"] for r in rs]),
            "train_s": mean_ci([r["train_s"] for r in rs]), "flops_total": mean_ci([r["flops_total"] for r in rs]),
        }
    per_seed = [reach({n: reach_curve(by[(n, s)]["curve"]) for n in names if (n, s) in by}, baseline=baseline)
                for s in seeds if (baseline, s) in by]
    out["reach"] = reach_across_seeds(per_seed, baseline) if per_seed else None
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--methods", default="grpo,aero,dapo")
    ap.add_argument("--ks", default="0,1,2", help="max_staleness values, each K or K:CORRECTION (4:mis)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--set", action="append", default=[], help="config override KEY=JSON (e.g. batch_prompts=32)")
    ap.add_argument("--out", default="runs/async_bench")
    args = ap.parse_args(argv)
    base: dict[str, Any] = {"preset": args.preset, "steps": args.steps, "device": "cpu", "checkpoint_every": 0}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        node = base
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = parsed
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    ks = [parse_variant(k) for k in args.ks.split(",")]
    out = Path(args.out)
    results = []
    for i, seed in enumerate(seeds):
        order = [(m, k) for m in methods for k in ks]
        order = order[i % len(order):] + order[:i % len(order)]  # rotate: no run always first
        for method, (k, correction) in order:
            r = run_one(base, method, k, seed, out, correction)
            results.append(r)
            print(f"seed {seed} {r['name']}: {r['median'][mk.STEP_S]:.3f} s/step (median), final Avg@k "
                  f"{r['final_avg_at_k']:.3f}, {r['wall_s']:.0f} s wall", flush=True)
    baseline = name_of(methods[0], *ks[0])
    report = {"meta": {"base": base, "seeds": seeds, "methods": methods, "ks": args.ks.split(","), "baseline": baseline,
                       "command": " ".join(sys.argv)},
              "summary": summarize(results, baseline), "results": results}
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report["summary"], indent=1, default=str)[:6000])
    return report


if __name__ == "__main__":
    main()
