"""What storing a step's detail costs the trainer (issue 24): the time of
trainer/platform/step_detail.py::step_detail per step (wrapped around the embedded collector's call),
the rows and JSON bytes it stores, against the step time, on the tiny preset (AERO and GRPO,
10 steps, default operator caps). Usage: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/step_detail_bench.py"""

from __future__ import annotations

import json
import statistics
import tempfile
import time

import trainer.embedded.collect as col
from trainer.spec.config import parse_run_config
from trainer.platform.run import run_training
from trainer.spec.operator_policy import RunPolicy
from trainer.platform.sinks import MemorySink

TIMES: list[float] = []
ORIGINAL = col.step_detail


def timed(*args, **kw):
    t0 = time.perf_counter()
    out = ORIGINAL(*args, **kw)
    TIMES.append(time.perf_counter() - t0)
    return out


def main() -> None:
    col.step_detail = timed
    for method in ("aero", "grpo"):
        TIMES.clear()
        sink = MemorySink()
        cfg = parse_run_config({"preset": "tiny", "method": method, "steps": 10, "eval_every": 0, "eval_problems": 4,
                                "eval_n": 2, "checkpoint_every": 0})
        with tempfile.TemporaryDirectory() as d:
            run_training(cfg, d, sink, policy=RunPolicy())
        step_s = [m["time/step_s"] for m in sink.steps.values()]
        sizes = [len(json.dumps(x)) for x in sink.details.values()]
        rows = [len(x["rollouts"]) for x in sink.details.values()]
        print(method, f"batch_prompts={cfg.batch_prompts} n_total={cfg.n_total}",
              f"detail ms/step median {1000 * statistics.median(TIMES):.2f} max {1000 * max(TIMES):.2f}",
              f"step_s median {statistics.median(step_s):.3f}", f"rows/step median {statistics.median(rows)} max {max(rows)}",
              f"JSON bytes/step median {statistics.median(sizes)} max {max(sizes)}")


if __name__ == "__main__":
    main()
