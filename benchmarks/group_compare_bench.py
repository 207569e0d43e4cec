"""Latency of the seed-group endpoints (issue 6) on a realistic sweep.

Seeds a store with ``--methods`` x ``--seeds`` runs of ``--steps`` steps each (the trainer's
~70 metric keys per step) and a final evaluation per run like the embedded task's: 7
benchmarks x 64 problems + the pooled ``overall`` (448 problems), each with per-problem (n, c).
Then times, in this process (FastAPI TestClient, no network), the first (cold) request and the
median of the repeats (warm: served from the API's response cache until a run changes):

* ``GET /api/compare/groups`` (t intervals, per-seed-pair ratios, 2 paired tests per benchmark
  per non-baseline group: 10,000 sign flips + 1,000 two-level bootstrap draws each);
* ``GET /api/compare/curves`` for 2 keys on each x axis (every stored step read).

    python benchmarks/group_compare_bench.py --db sqlite postgresql
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi.testclient import TestClient  # noqa: E402

from backend.db import runs as repo  # noqa: E402
from backend.db.metrics import upsert_eval_results, upsert_step_metrics  # noqa: E402
from backend.db.migrate import migrate  # noqa: E402
from backend.db.session import session_scope  # noqa: E402
from tests.stores import temp_database  # noqa: E402
from backend.main import create_app  # noqa: E402
from backend.settings import Settings  # noqa: E402
from benchmarks.platform_bench import synthetic_metrics  # noqa: E402
from trainer.spec.config import RunConfig  # noqa: E402

BENCHES = ("L1-add1", "L2-add2", "L3-sub2", "L4-add3", "L5-mul2x1", "L6-mul2x2", "OOD-add4")


def seed_sweep(url: str, methods: list[str], seeds: int, steps: int, problems: int) -> list[int]:
    rng = random.Random(0)
    ids = []
    with session_scope(url) as s:
        for method in methods:
            for seed in range(seeds):
                run = repo.create_run(s, RunConfig(method=method, seed=seed, steps=steps).model_dump(mode="json"), queue="cpu")
                upsert_step_metrics(s, run.id, {i: synthetic_metrics(i, rng) for i in range(1, steps + 1)})
                results, pooled = {}, []
                for b in BENCHES:
                    pp = [[8, rng.randint(0, 8)] for _ in range(problems)]
                    results[b], pooled = {"n": 8, "k": 8, "per_problem": pp}, pooled + pp
                results["overall"] = {"n": 8, "k": 8, "per_problem": pooled}
                upsert_eval_results(s, run.id, steps, results)
                ids.append(run.id)
    return ids


def timed(client: TestClient, path: str, repeat: int) -> dict[str, float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = client.get(path)
        times.append(time.perf_counter() - t0)
        assert r.status_code == 200, r.text
    return {"first_ms": 1e3 * times[0], "median_ms": 1e3 * statistics.median(times[1:] or times), "bytes": len(r.content)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", nargs="+", default=["sqlite"])
    ap.add_argument("--methods", nargs="+", default=["grpo", "dapo", "aero", "aero-s1", "aero-s1s2"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--problems", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs; {len(args.methods)} methods x {args.seeds} seeds x {args.steps} steps; "
          f"{len(BENCHES)} benchmarks x {args.problems} problems (+ overall)")
    for kind in args.db:
        with temp_database(kind, Path(tempfile.mkdtemp())) as url, tempfile.TemporaryDirectory() as data:
            migrate(url)
            ids = ",".join(map(str, seed_sweep(url, args.methods, args.seeds, args.steps, args.problems)))
            app = create_app(Settings(database_url=url, data_dir=data))
            with TestClient(app) as client:
                paths = [("groups", f"/api/compare/groups?run_ids={ids}")] + [
                    (f"curves x={x}", f"/api/compare/curves?run_ids={ids}&keys=reward/mean,zero_acc/after_rescue&x={x}")
                    for x in ("step", "flops", "time")]
                for label, path in paths:
                    r = timed(client, path, args.repeat)
                    print(f"  {kind:<10} {label:<14} cold {r['first_ms']:7.0f} ms  warm (cached, median) {r['median_ms']:7.1f} ms  "
                          f"{r['bytes'] / 1024:7.1f} KiB")


if __name__ == "__main__":
    main()
