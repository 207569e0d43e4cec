"""Uncached metric reads and the cost of keeping them fast (issue 14), on real SQLite and PostgreSQL.

1. Candidates, in this process (one thread, no HTTP): the time to build the answer of
   ``GET /api/runs/{id}/metrics`` (the dashboard's 5 keys at ``max_points=500``, and all keys)
   for one run of ``--steps`` steps, and the write cost per step, for the per-step JSON rows
   the store used before (keys extracted by the database) and for columnar chunks of 64, 128
   and 256 steps (``backend.db.series``). This is how ``CHUNK_STEPS`` was chosen.
2. HTTP: ``--runs`` runs x ``--steps`` steps x 63 keys in the store, a real API (``backend.serve``)
   (``--workers``) with the response cache off, so every request builds its answer from the
   store; ``--clients`` keep-alive clients cycle through the runs. p50/p99 and req/s for the
   dashboard's query, 5 keys at full resolution and all keys.
3. Ingestion per step against the step time of a real tiny-preset step (or ``--step-s``):
   a synchronous upsert + progress, committed, and the worker's ``DbSink`` (training thread
   blocked), both maintaining the columnar copy.

    python benchmarks/metrics_read_bench.py --json runs/metrics-read-bench.json
    python benchmarks/metrics_read_bench.py --db sqlite --runs 2 --steps 300 --seconds 2 --step-s 1.5  # quick
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from platform_bench import (  # noqa: E402
    FIVE_KEYS,
    Server,
    bench_ingestion,
    bench_worker_sink,
    load,
    measure_step_time,
    synthetic_metrics,
)
from sqlalchemy import select  # noqa: E402

from backend.db import runs as repo  # noqa: E402
from backend.db import series  # noqa: E402
from backend.db.metrics import upsert_step_metrics  # noqa: E402
from backend.db.migrate import migrate  # noqa: E402
from backend.db.models import StepMetric  # noqa: E402
from backend.db.session import get_engine, make_sessionmaker, session_scope  # noqa: E402
from backend.services.downsample import downsample_indices  # noqa: E402
from backend.services.metric_reads import dumps, metrics_payload  # noqa: E402
from tests.stores import temp_database  # noqa: E402
from trainer.spec.config import RunConfig  # noqa: E402

DASHBOARD = f"keys={FIVE_KEYS}&max_points=500"
QUERIES = (("dashboard: 5 keys, max_points=500", DASHBOARD), ("5 keys", f"keys={FIVE_KEYS}"), ("all keys", ""))


def seed_runs(url: str, runs: int, steps: int, batch: int = 500) -> list[int]:
    """``runs`` finished runs of ``steps`` synthetic 63-key steps each."""
    rng, ids = random.Random(1), []
    for _ in range(runs):
        with session_scope(url) as s:
            run_id = repo.create_run(s, RunConfig(steps=steps).model_dump(mode="json"), queue="cpu").id
        for lo in range(1, steps + 1, batch):
            with session_scope(url) as s:
                upsert_step_metrics(s, run_id, {i: synthetic_metrics(i, rng) for i in range(lo, min(steps, lo + batch - 1) + 1)})
        with session_scope(url) as s:
            repo.claim_run(s, run_id, "bench")
            repo.mark_succeeded(s, run_id)
        ids.append(run_id)
    return ids


# ------------------------------------------------------------------ 1. candidates


def legacy_payload(session, run_id: int, keys: list[str] | None, max_points: int) -> bytes:
    """The answer as the per-step JSON store built it: the database extracts each key from each
    step's JSON (``metrics ->> key``), or ships every step's dict; Python decimates."""
    if keys is None:
        rows = session.execute(select(StepMetric.step, StepMetric.metrics).where(StepMetric.run_id == run_id)
                               .order_by(StepMetric.step)).all()
        seen = sorted({k for _, m in rows for k in m})
        steps, cols = [r[0] for r in rows], {k: [r[1].get(k) for r in rows] for k in seen}
    else:
        rows = session.execute(select(StepMetric.step, *[StepMetric.metrics[k].as_float() for k in keys])
                               .where(StepMetric.run_id == run_id).order_by(StepMetric.step)).all()
        steps, cols = [r[0] for r in rows], {k: [r[i + 1] for r in rows] for i, k in enumerate(keys)}
    idx = downsample_indices(len(steps), 1, max_points)
    return dumps({"run_id": run_id, "steps": [steps[i] for i in idx], "series": {k: [v[i] for i in idx] for k, v in cols.items()},
                  "stored_steps": len(steps), "last_step": steps[-1] if steps else None, "run_status": "succeeded"})


def _median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def bench_candidates(kind: str, steps: int, write_steps: int, repeat: int) -> list[dict]:
    """Read and write cost of each storage candidate on one ``steps``-step run."""
    five, out = FIVE_KEYS.split(","), []
    default = series.CHUNK_STEPS
    with temp_database(kind, Path(tempfile.mkdtemp())) as url:
        migrate(url)
        maker = make_sessionmaker(get_engine(url))
        try:
            for chunk in (64, 128, 256):
                series.CHUNK_STEPS = chunk  # every run of this loop is written and read with it
                run_id = seed_runs(url, 1, steps)[0]
                with maker() as s:
                    read5 = _median_ms(lambda: dumps(metrics_payload(s, run_id, five, None, 1, 500)), repeat)
                    read_all = _median_ms(lambda: dumps(metrics_payload(s, run_id, None, None, 1, 5000)), max(3, repeat // 4))
                out.append({"db": kind, "storage": f"columnar chunks of {chunk} steps", "dashboard_ms": read5, "all_keys_ms": read_all,
                            "write_ms_per_step": _write_ms(url, write_steps)})
        finally:
            series.CHUNK_STEPS = default
        with maker() as s:
            read5 = _median_ms(lambda: legacy_payload(s, run_id, five, 500), repeat)
            read_all = _median_ms(lambda: legacy_payload(s, run_id, None, 5000), max(3, repeat // 4))
        out.append({"db": kind, "storage": "one JSON row per step (before)", "dashboard_ms": read5, "all_keys_ms": read_all,
                    "write_ms_per_step": None})
    return out


def _write_ms(url: str, n: int) -> float:
    """Mean ms per step of writing ``n`` steps one transaction each (upsert only, committed)."""
    rng = random.Random(2)
    with session_scope(url) as s:
        run_id = repo.create_run(s, RunConfig(steps=n).model_dump(mode="json"), queue="cpu").id
    t0 = time.perf_counter()
    for step in range(1, n + 1):
        with session_scope(url) as s:
            upsert_step_metrics(s, run_id, {step: synthetic_metrics(step, rng)})
    return 1e3 * (time.perf_counter() - t0) / n


# ------------------------------------------------------------------ 2. HTTP


def bench_http(kind: str, runs: int, steps: int, clients: int, seconds: float, workers: int, launcher: str = "serve") -> list[dict]:
    out = []
    with temp_database(kind, Path(tempfile.mkdtemp())) as url, tempfile.TemporaryDirectory() as data:
        migrate(url)
        t0 = time.perf_counter()
        run_ids = seed_runs(url, runs, steps)
        seed_s = time.perf_counter() - t0
        server = Server(url, workers, 0, data, launcher)  # response cache off: every answer is built from the store
        try:
            for label, query in QUERIES:
                paths = [f"/api/runs/{r}/metrics" + (f"?{query}" if query else "") for r in run_ids]
                out.append({"db": kind, "what": label, "runs": runs, "steps": steps, "workers": workers, "launcher": launcher, "seed_s": seed_s,
                            **load(server, paths, clients, seconds)})
        finally:
            server.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["candidates", "http", "ingest"], default=None)
    ap.add_argument("--db", nargs="+", default=["postgresql", "sqlite"])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--workers", type=int, default=2, help="API worker processes")
    ap.add_argument("--launcher", choices=["serve", "uvicorn"], default="serve",
                    help="serve: python -m backend.serve (one SO_REUSEPORT socket per worker, what compose runs); "
                         "uvicorn: uvicorn --workers (one shared socket), for comparison")
    ap.add_argument("--repeat", type=int, default=40, help="reads per candidate (median)")
    ap.add_argument("--write-steps", type=int, default=200, help="steps written one by one per candidate")
    ap.add_argument("--ingest-steps", type=int, default=300)
    ap.add_argument("--train-steps", type=int, default=4, help="tiny-preset steps timed for the step-time reference")
    ap.add_argument("--step-s", type=float, default=None, help="step time to compare ingestion with (skips the trainer)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    report: dict = {"machine": f"{os.cpu_count()} CPUs", "python": sys.version.split()[0], "loadavg_1m_start": os.getloadavg()[0]}

    if args.only in (None, "candidates"):
        rows = [r for kind in args.db for r in bench_candidates(kind, args.steps, args.write_steps, args.repeat)]
        report["candidates"] = rows
        print(f"\nCandidates, one {args.steps}-step run, in-process (median ms to build the answer; write ms per step)")
        for r in rows:
            w = "    -" if r["write_ms_per_step"] is None else f"{r['write_ms_per_step']:5.2f}"
            print(f"  {r['db']:<10} {r['storage']:<34} dashboard {r['dashboard_ms']:6.2f}  all keys {r['all_keys_ms']:7.2f}  write {w}")

    if args.only in (None, "http"):
        rows = [r for kind in args.db
                for r in bench_http(kind, args.runs, args.steps, args.clients, args.seconds, args.workers, args.launcher)]
        report["http"] = rows
        print(f"\nHTTP, cache off, {args.clients} clients over {args.runs} runs x {args.steps} steps, {args.seconds:g} s each, "
              f"{args.launcher} --workers {args.workers}")
        for r in rows:
            print(f"  {r['db']:<10} {r['what']:<34} {r['rps']:6.0f} req/s  p50 {r['p50_ms']:6.1f}  p99 {r['p99_ms']:6.1f}  "
                  f"max {r['max_ms']:6.1f} ms  {r['bytes'] / 1024:7.1f} KiB  errors {r['errors']}  "
                  f"server CPU {r['server_cpu_ms_per_request']:.2f} ms/req  load {r['loadavg_1m'][0]:.1f}  (seeded in {r['seed_s']:.0f} s)")

    if args.only in (None, "ingest"):
        step_s, metrics, how = (args.step_s, None, "given with --step-s") if args.step_s else measure_step_time(args.train_steps)
        kinds = [k for k in ("sqlite", "postgresql") if k in args.db]
        ingest = [bench_ingestion(kind, args.ingest_steps, metrics) for kind in kinds]
        sinks = [r for kind in kinds if (r := bench_worker_sink(kind, args.ingest_steps, metrics))]
        for row in ingest:
            row["overhead_pct"] = None if step_s is None else 100 * row["mean_ms"] / 1e3 / step_s
        for row in sinks:
            row["overhead_pct"] = None if step_s is None else 100 * row["blocked_ms_per_step"] / 1e3 / step_s
        report["ingestion"] = {"step_s": step_s, "step_time_source": how, "rows": ingest, "worker_sink": sinks}
        print(f"\nIngestion per step; step time {step_s and f'{step_s:.3f} s'} ({how})")
        for r in ingest:
            ov = "n/a" if r["overhead_pct"] is None else f"{r['overhead_pct']:.3f}%"
            print(f"  {r['db']:<10} synchronous upsert + progress: mean {r['mean_ms']:.2f} ms  p99 {r['p99_ms']:.2f}  -> {ov} of a step")
        for r in sinks:
            ov = "n/a" if r["overhead_pct"] is None else f"{r['overhead_pct']:.4f}%"
            print(f"  {r['db']:<10} worker DbSink: training thread blocked {r['blocked_ms_per_step']:.3f} ms/step "
                  f"(background writes {r['write_ms_per_step']:.2f} ms/step) -> {ov} of a step")

    report["loadavg_1m_end"] = os.getloadavg()[0]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
