"""One FSDP rank vs two on verl's real RayPPOTrainer on the CPU (trainer/verl/plugins): the same
GRPO run (tiny preset, arithmetic, 8 prompts x 8 rollouts, one seed) with
``resources.gpus_per_node`` 1 and 2, back to back in one process. Two ranks on the CPU are two
gloo processes (logical Ray GPUs) and two rollout replicas sharing the host's cores: this
measures what data parallelism costs here, not a speed-up.

Reported per rank count: the median step time over steps 2..N (step 1 carries the warm-up),
verl's split of those steps (rollout, old log-probs, update, weight sync; medians), the
start-up before step 1 (Ray, the workers, the first weight sync), the wall time, and the load
average before and after (other work on the host skews every number).

    .venv-verl/bin/python benchmarks/verl_ranks.py [--steps 3] [--seed 3] [--json runs/verl_ranks.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SPLIT = ("time/rollout_s", "time/reward_s", "time/old_logprob_s", "time/update_s", "time/weight_sync_s", "time/train_s")


def one_run(ranks: int, args, out: Path) -> dict:
    from trainer.spec.config import for_method, parse_run_config
    from trainer.platform.sinks import MemorySink
    from trainer.verl.runner import run_verl

    cfg = parse_run_config(for_method({
        "engine": "verl", "device": "cpu", "method": "grpo", "steps": args.steps, "seed": args.seed,
        "batch_prompts": 8, "n_total": 8, "eval_every": 0, "eval_problems": 8, "eval_n": 4, "checkpoint_every": 0,
        "resources": {"gpus_per_node": ranks}}, "grpo"))
    shutil.rmtree(out, ignore_errors=True)
    sink, first = MemorySink(), {}

    def progress(step, total, metrics):
        first.setdefault("t", time.perf_counter())
        first.setdefault("step_s", float(metrics.get("time/step_s", 0.0)))

    t0 = time.perf_counter()
    summary = run_verl(cfg, out, sink, progress=progress)
    wall = time.perf_counter() - t0
    steps = [sink.steps[s] for s in sorted(sink.steps)]
    steady = steps[1:] or steps
    ckpt = sorted(p.name for p in (out / "verl_checkpoints").glob(f"global_step_{args.steps}/actor/model_world_size_*"))
    return {
        "ranks": ranks, "status": summary["status"], "steps": len(steps), "wall_s": wall,
        "startup_s": first["t"] - t0 - first["step_s"] if first else None,
        "step_s": [float(m["time/step_s"]) for m in steps],
        "step_s_median_after_first": statistics.median(float(m["time/step_s"]) for m in steady),
        "split_median_after_first": {k: statistics.median(float(m[k]) for m in steady) for k in SPLIT
                                     if all(k in m for m in steady)},
        "checkpoint_shards": ckpt,  # model_world_size_<ranks>_rank_<r>.pt: verl really ran that many ranks
        "rollout/generated": [m["rollout/generated"] for m in steps],
        "tokens/generated": [m["tokens/generated"] for m in steps],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--json", type=Path, default=ROOT / "runs" / "verl_ranks.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="verl-ranks-"))
    load_before = os.getloadavg()
    rows = [one_run(r, args, work / f"ranks{r}") for r in (1, 2)]
    load_after = os.getloadavg()
    shutil.rmtree(work, ignore_errors=True)
    report = {"host": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
              "load_avg_before": load_before, "load_avg_after": load_after, "steps": args.steps, "seed": args.seed,
              "runs": rows}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2))
    cols = ("time/rollout_s", "time/old_logprob_s", "time/update_s", "time/weight_sync_s")
    print(f"\nverl on the CPU, GRPO tiny 8x8, {args.steps} steps, seed {args.seed}, {os.cpu_count()} cores; "
          f"load avg before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, "
          f"after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}")
    print(f"{'ranks':>5} {'start-up s':>10} {'step s (med, 2..)':>17} " + " ".join(f"{c[5:]:>15}" for c in cols)
          + f" {'wall s':>7}")
    for r in rows:
        split = r["split_median_after_first"]
        print(f"{r['ranks']:>5} {r['startup_s']:>10.1f} {r['step_s_median_after_first']:>17.2f} "
              + " ".join(f"{split.get(c, float('nan')):>15.2f}" for c in cols) + f" {r['wall_s']:>7.1f}")
    print(f"JSON: {args.json}")


if __name__ == "__main__":
    main()
