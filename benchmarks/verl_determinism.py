"""What the verl HF rollout server's keyed sampling costs, and whether it makes a seed reproducible:
the same GRPO run (tiny preset, arithmetic, 8 prompts x 8 rollouts, one seed) on verl's real
RayPPOTrainer on the CPU, twice with each request's draws keyed by its ``det-`` id (the default,
``rollout.full_determinism``) and twice drawing from the replica's one generator stream in arrival
order (``full_determinism=false``, as before), in the order keyed, stream, keyed, stream.

Reported per mode: the median rollout and step time over steps 2..N (step 1 carries the warm-up),
and whether the two runs of the mode stored the same metrics (every key but timings and system
readings; the losses included). Other work on the host skews every time: the load average is printed.

    .venv-verl/bin/python benchmarks/verl_determinism.py [--steps 6] [--seed 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SKIP = ("time/", "system/", "verl/", "savings/")
STREAM = "actor_rollout_ref.rollout.full_determinism=false"


def one_run(mode: str, args, out: Path) -> dict[int, dict]:
    from trainer.spec.config import for_method, parse_run_config
    from trainer.platform.sinks import MemorySink
    from trainer.verl.runner import run_verl

    os.environ["AERO_VERL_OVERRIDES"] = STREAM if mode == "stream" else ""
    cfg = parse_run_config(for_method({
        "engine": "verl", "device": "cpu", "method": "grpo", "steps": args.steps, "seed": args.seed,
        "batch_prompts": 8, "n_total": 8, "eval_every": 0, "eval_problems": 8, "eval_n": 4,
        "checkpoint_every": 0}, "grpo"))
    sink = MemorySink()
    summary = run_verl(cfg, out, sink)
    assert summary["status"] == "completed", summary
    return sink.steps


def content(steps: dict[int, dict]) -> dict[int, dict]:
    """Every metric but timings, system readings and the servers' batched-call count (how requests
    bunch into batches is timing)."""
    return {s: {k: v for k, v in m.items() if not k.startswith(SKIP) and not k.endswith("_s")
                and k != "rollout/engine_calls"} for s, m in steps.items()}


def median(steps: dict[int, dict], key: str) -> float:
    return statistics.median(m[key] for s, m in steps.items() if s >= 2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--seed", type=int, default=3)
    args = p.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    runs: dict[str, list[dict]] = {"keyed": [], "stream": []}
    tmp = Path(tempfile.mkdtemp(prefix="verl_det_"))
    try:
        for i, mode in enumerate(["keyed", "stream", "keyed", "stream"]):
            runs[mode].append(one_run(mode, args, tmp / f"{i}-{mode}"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average after: {os.getloadavg()}")
    print("| mode | rollout s/step (median, steps 2..N), runs 1 / 2 | step s | tokens generated, steps 1..N, run 1 | "
          "two runs store the same metrics |")
    print("|---|---|---|---|---|")
    for mode, (a, b) in runs.items():
        same = content(a) == content(b)
        print(f"| {mode} | {median(a, 'time/rollout_s'):.3f} / {median(b, 'time/rollout_s'):.3f} | "
              f"{median(a, 'time/step_s'):.2f} / {median(b, 'time/step_s'):.2f} | "
              f"{[int(a[s]['tokens/generated']) for s in sorted(a)]} | {same} |")


if __name__ == "__main__":
    main()
