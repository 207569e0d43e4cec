"""The same run on both engines (issue 21, item 5): the tiny preset, the same base and seed, N steps
of GRPO and of AERO on the embedded engine and on verl's real RayPPOTrainer on the CPU
(trainer/verl/plugins), one after another in one process (nothing else running).

Reported per engine and method: the per-step accounting (generated and trained rollouts and
tokens, FLOPs by the same formula, with the extra forwards each engine really does), the time per
step and its split, verl's overhead (start-up before step 1: Ray, workers, the first weight sync;
per step: weight sync, old log-probs, update), and the final held-out Avg@8 with its 95% CI.
Samples differ between engines (each has its own sampler RNG), so per-step numbers agree in
distribution, not exactly: the table gives means and 95% intervals over the steps.

    .venv-verl/bin/python benchmarks/verl_vs_embedded.py --steps 20 --json runs/verl_vs_embedded.json
    .venv-verl/bin/python benchmarks/verl_vs_embedded.py --steps 2 --quick    # a smoke test (8 prompts)
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KEYS = ("rollout/generated", "rollout/trained", "tokens/generated", "tokens/trained", "flops/rollout", "flops/train",
        "flops/total", "reward/mean", "zero_acc/after_explore", "zero_acc/after_rescue", "rollout/gen_calls",
        "time/step_s", "time/rollout_s", "time/train_s", "time/old_logprob_s", "time/update_s", "time/weight_sync_s")


def mean_ci(xs: list[float]) -> tuple[float, float, float]:
    """(mean, lo, hi) of a Student-t 95% interval over the steps (lo = hi = mean for one value)."""
    from trainer.core.stats import mean_ci as ci

    r = ci(xs)
    return r["mean"], r["lo"] if r["lo"] is not None else r["mean"], r["hi"] if r["hi"] is not None else r["mean"]


def one_run(engine: str, method: str, args, out: Path) -> dict:
    from trainer.spec.config import parse_run_config
    from trainer.platform.run import run_training
    from trainer.platform.sinks import MemorySink

    cfg = {"method": method, "engine": engine, "device": "cpu", "steps": args.steps, "seed": args.seed}
    if args.quick:
        cfg.update(batch_prompts=8, n_total=8, eval_problems=8, aero={"n_explore": 4})
    cfg = parse_run_config(cfg)
    shutil.rmtree(out, ignore_errors=True)
    sink = MemorySink()
    first = {}

    def progress(step, total, metrics):
        first.setdefault("t", time.perf_counter())
        first.setdefault("step_s", float(metrics.get("time/step_s", 0.0)))

    t0 = time.perf_counter()
    summary = run_training(cfg, out, sink, progress=progress)
    wall = time.perf_counter() - t0
    steps = [sink.steps[s] for s in sorted(sink.steps)]
    row = {"engine": engine, "method": method, "steps": len(steps), "wall_s": wall,
           "final": summary["final_eval"]["overall"] if summary.get("final_eval") else None}
    for k in KEYS:
        vals = [float(m[k]) for m in steps if k in m]
        if vals:
            row[k] = mean_ci(vals)
    # step 1 carries the warm-up of every engine; the steady state excludes it
    row["time/step_s_steady"] = mean_ci([float(m["time/step_s"]) for m in steps[1:]] or [float(steps[0]["time/step_s"])])
    step_sum = sum(float(m["time/step_s"]) for m in steps)
    evals = sum(float(m.get("time/eval_s", 0.0)) for m in steps)
    row["overhead_s"] = wall - step_sum - (evals if engine == "verl" else 0.0)  # start-up, evals (embedded), teardown
    # before step 1 started, the base model's evaluation included: verl's Ray, workers and first
    # weight sync; the embedded engine's model load
    row["startup_s"] = first["t"] - t0 - first["step_s"]
    row["eval_s"] = evals
    return row


def table(rows: list[dict]) -> str:
    cols = ["rollout/generated", "rollout/trained", "tokens/generated", "tokens/trained", "flops/total",
            "reward/mean", "rollout/gen_calls", "time/step_s", "time/step_s_steady", "time/rollout_s", "time/train_s",
            "time/old_logprob_s", "time/update_s", "time/weight_sync_s"]
    head = "| engine | method | " + " | ".join(cols) + " | final Avg@8 [95% CI] | wall s | outside steps s |"
    lines = [head, "|" + "---|" * (len(cols) + 5)]
    for r in rows:
        cells = []
        for c in cols:
            if c in r:
                m, lo, hi = r[c]
                cells.append(f"{m:.3g} [{lo:.3g}, {hi:.3g}]" if c.startswith(("flops", "tokens")) else
                             f"{m:.3f} [{lo:.3f}, {hi:.3f}]")
            else:
                cells.append("-")
        f = r["final"]
        final = f"{f['avg_at_k']:.3f} [{f['avg_ci'][0]:.3f}, {f['avg_ci'][1]:.3f}]" if f else "-"
        lines.append(f"| {r['engine']} | {r['method']} | " + " | ".join(cells) +
                     f" | {final} | {r['wall_s']:.0f} | {r['overhead_s']:.0f} |")
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default="grpo,aero")
    ap.add_argument("--engines", default="embedded,verl")
    ap.add_argument("--quick", action="store_true", help="8 prompts x 8 rollouts (a smoke test)")
    ap.add_argument("--out", type=Path, default=Path("runs/verl_vs_embedded"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = []
    for method in args.methods.split(","):
        for engine in args.engines.split(","):
            rows.append(one_run(engine, method, args, args.out / f"{engine}-{method}"))
            print(f"{engine} {method}: {rows[-1]['wall_s']:.0f}s", flush=True)
    print(table(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": platform.processor() or platform.machine(), "argv": sys.argv,
                                         "rows": rows}, indent=2))
    return rows


if __name__ == "__main__":
    main()
