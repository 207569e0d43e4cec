"""Platform targets (issue 3), measured on this machine against real SQLite and PostgreSQL.

1. Metric ingestion overhead per training step: what a worker writes per step (one idempotent
   upsert of the step's metrics + progress/heartbeat, one commit), timed against the step time
   of a real tiny-preset training step (or ``--step-s`` when the preset is not built yet).
2. ``GET /api/runs/{id}/metrics`` for a 2,000-step run: latency percentiles with 20 concurrent
   clients (closed loop, keep-alive) on PostgreSQL, with the response cache on and off, for all
   keys, for 5 keys, and for 5 keys downsampled to 500 points.
3. ``GET /api/runs/{id}``: requests per second at 20 concurrent clients.

The API runs as a real subprocess (``python -m backend.serve``, uvicorn workers); the load generator is a minimal asyncio
HTTP/1.1 client in this process (so both share the machine's cores, as they would here).

    python benchmarks/platform_bench.py                 # everything, prints a table and JSON
    python benchmarks/platform_bench.py --only ingest --step-s 1.8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.db import runs as repo  # noqa: E402
from backend.db.metrics import upsert_step_metrics  # noqa: E402
from backend.db.migrate import migrate  # noqa: E402
from backend.db.session import session_scope  # noqa: E402
from tests.stores import temp_database  # noqa: E402
from trainer.spec.config import RunConfig  # noqa: E402

# The step metric keys the trainer logs (docs/metrics.md; trainer/embedded/collect.py), ~70 per AERO step.
KEYS = (
    "time/step_s time/rollout_s time/reward_s time/train_s rollout/generated rollout/trained rollout/gen_calls "
    "tokens/generated tokens/trained tokens/response_trained flops/rollout flops/train flops/total strata/rescue "
    "strata/low strata/high zero_acc/after_explore zero_acc/after_rescue all_correct/ratio rescue/rescued "
    "rescue/rounds rescue/calls rescue/generated rescue/unused groups/rescued groups/bayes groups/low groups/high "
    "groups/zero reward/mean reward/trained_mean response/length_mean response/truncated_frac adv/abs_mean "
    "adv/zero_frac prompts/used loss/policy train/grad_norm train/entropy train/kl train/clip_frac "
    "savings/grpo_rollouts savings/grpo_tokens savings/s1_rollouts savings/s2_rollouts savings/s3_rollouts "
    "savings/s1_tokens savings/s2_tokens savings/s3_tokens savings/s1_flops savings/s2_flops savings/s3_flops "
    "savings/s1_s savings/s2_s savings/s3_s verifier/errors verifier/timeouts optim/lr eval/avg_at_k eval/pass_at_k"
).split()
FIVE_KEYS = "reward/mean,time/step_s,tokens/trained,zero_acc/after_explore,flops/total"


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of values."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def synthetic_metrics(step: int, rng: random.Random) -> dict[str, float]:
    return {k: rng.random() * (10 ** rng.randint(0, 12)) for k in KEYS} | {"optim/lr": 1e-4, "rescue/rounds": float(step % 7)}


# ------------------------------------------------------------------ 1. ingestion


def measure_step_time(steps: int) -> tuple[float | None, dict[str, float] | None, str]:
    """Mean time/step_s of a real tiny-preset AERO run (its first step excluded), and one step's metrics."""
    try:
        from trainer.platform.run import run_training
        from trainer.platform.sinks import MetricSink
    except Exception as e:  # noqa: BLE001
        return None, None, f"trainer.embedded.loop unavailable: {e}"

    class Capture(MetricSink):  # checkpoint and resume events: the protocol's no-op defaults
        def __init__(self):
            self.rows: list[dict[str, float]] = []

        def log(self, step, metrics):
            self.rows.append(dict(metrics))

        def log_eval(self, step, results):
            pass

        def close(self):
            pass

    sink = Capture()
    cfg = RunConfig(method="aero", steps=steps, eval_every=0, eval_problems=8, checkpoint_every=0)
    try:
        with tempfile.TemporaryDirectory() as out:
            run_training(cfg, out, sink)
    except Exception as e:  # noqa: BLE001
        return None, None, f"tiny run failed: {type(e).__name__}: {e}"
    times = [r["time/step_s"] for r in sink.rows[1:]] or [r["time/step_s"] for r in sink.rows]
    return statistics.mean(times), sink.rows[-1], f"tiny preset, aero, batch_prompts={cfg.batch_prompts}, n_total={cfg.n_total}, {steps} steps"


def bench_ingestion(kind: str, n_steps: int, metrics: dict[str, float] | None) -> dict:
    """Per-step write cost: upsert this step's metrics + record_progress, committed (as a worker does)."""
    rng = random.Random(0)
    with temp_database(kind, Path(tempfile.mkdtemp())) as url:
        migrate(url)
        with session_scope(url) as s:
            run_id = repo.create_run(s, RunConfig(steps=n_steps).model_dump(mode="json"), queue="cpu").id
            repo.claim_run(s, run_id, "bench")
        times = []
        for step in range(1, n_steps + 1):
            m = metrics or synthetic_metrics(step, rng)
            t0 = time.perf_counter()
            with session_scope(url) as s:
                upsert_step_metrics(s, run_id, {step: m})
                repo.record_progress(s, run_id, step, n_steps, worker="bench")
            times.append(time.perf_counter() - t0)
    return {"db": kind, "steps": n_steps, "keys": len(metrics or synthetic_metrics(0, rng)),
            "mean_ms": 1e3 * statistics.mean(times), "p50_ms": 1e3 * pct(times, 50), "p99_ms": 1e3 * pct(times, 99)}


def bench_worker_sink(kind: str, n_steps: int, metrics: dict[str, float] | None) -> dict | None:
    """The worker's buffered DbSink (worker/sink.py), if present: seconds the training thread is
    blocked per step (its background writer does the upserts), 1 ms of 'training' per step."""
    try:
        from worker.sink import DbSink
    except Exception:  # noqa: BLE001
        return None
    rng = random.Random(0)
    with temp_database(kind, Path(tempfile.mkdtemp())) as url:
        migrate(url)
        with session_scope(url) as s:
            run_id = repo.create_run(s, RunConfig(steps=n_steps).model_dump(mode="json"), queue="cpu").id
        sink = DbSink(url, run_id)
        for step in range(1, n_steps + 1):
            sink.log(step, metrics or synthetic_metrics(step, rng))
            if step % 20 == 0:  # a checkpoint every 20 steps: the sink writes synchronously first
                sink.before_checkpoint(step)
            time.sleep(0.001)
        sink.close()
        st = sink.stats()
    return {"db": kind, "steps": n_steps, "blocked_ms_per_step": 1e3 * st["blocked_s"] / n_steps,
            "write_ms_per_step": 1e3 * st["write_s"] / n_steps, "flushes": st["flushes"]}


# ------------------------------------------------------------------ 2./3. HTTP load


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The API in a subprocess on a given store: ``python -m backend.serve`` (what compose runs),
    or ``uvicorn backend.main:app`` with ``launcher="uvicorn"``."""

    def __init__(self, url: str, workers: int, cache_mb: float, data_dir: str, launcher: str = "serve"):
        self.port = free_port()
        env = {**os.environ, "DATABASE_URL": url, "AERO_DATA_DIR": data_dir, "AERO_METRICS_CACHE_MB": str(cache_mb),
               "AUTH_PROTECT_READS": "false"}
        env.pop("REDIS_URL", None)
        start = ["backend.serve"] if launcher == "serve" else ["uvicorn", "backend.main:app"]
        cmd = [sys.executable, "-m", *start, "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(workers),
               "--log-level", "warning", "--no-access-log"]
        self.proc = subprocess.Popen(cmd, env=env, cwd=Path(__file__).resolve().parents[1])
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as c:
                    c.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if c.recv(64).startswith(b"HTTP/1.1 200"):
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("server did not start")

    def cpu_s(self) -> float:
        """CPU seconds used so far by the server: the uvicorn master and its worker processes."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pid, ppid = int(stat.parent.name), int(fields[1])
            if pid == self.proc.pid or ppid == self.proc.pid:
                total += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        return total

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_LEN = re.compile(rb"content-length: *(\d+)", re.I)


async def _client(port: int, paths: list[str], until: float, lat: list[float], errors: list[int], nbytes: list[int],
                  first: int = 0) -> None:
    """One keep-alive connection sending GETs of ``paths`` in turn (from ``paths[first]``)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    reqs = [f"GET {p} HTTP/1.1\r\nHost: bench\r\n\r\n".encode() for p in paths]
    i = first
    try:
        while time.perf_counter() < until:
            req, i = reqs[i % len(reqs)], i + 1
            t0 = time.perf_counter()
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            body = await reader.readexactly(int(_LEN.search(head).group(1)))
            lat.append(time.perf_counter() - t0)
            nbytes.append(len(body))
            if head[9:12] != b"200":
                errors.append(int(head[9:12]))
    finally:
        writer.close()


def load(server: Server, path: str | list[str], clients: int, seconds: float, warmup: float = 1.0) -> dict:
    """Closed-loop load: ``clients`` keep-alive connections, each sending the next request when
    the previous answer has fully arrived. Latencies of the warm-up second are dropped. A list
    of paths is cycled through, each client starting at a different one."""
    paths = [path] if isinstance(path, str) else list(path)

    async def main():
        lat: list[float] = []
        errors: list[int] = []
        nbytes: list[int] = []
        await asyncio.gather(*(_client(port, paths, time.perf_counter() + warmup, [], errors, [], c) for c in range(clients)))
        cpu0, t0 = server.cpu_s(), time.perf_counter()
        await asyncio.gather(*(_client(port, paths, t0 + seconds, lat, errors, nbytes, c) for c in range(clients)))
        return lat, errors, nbytes, time.perf_counter() - t0, server.cpu_s() - cpu0

    port = server.port
    load_before = os.getloadavg()[0]
    lat, errors, nbytes, elapsed, cpu = asyncio.run(main())
    shown = paths[0] if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1} more)"
    return {"path": shown, "clients": clients, "requests": len(lat), "errors": len(errors), "rps": len(lat) / elapsed,
            "p50_ms": 1e3 * pct(lat, 50), "p95_ms": 1e3 * pct(lat, 95), "p99_ms": 1e3 * pct(lat, 99),
            "max_ms": 1e3 * max(lat), "bytes": nbytes[0] if nbytes else 0,
            "server_cpu_ms_per_request": 1e3 * cpu / max(1, len(lat)), "loadavg_1m": [load_before, os.getloadavg()[0]]}


def seed_run(url: str, steps: int) -> int:
    rng = random.Random(1)
    with session_scope(url) as s:
        run_id = repo.create_run(s, RunConfig(steps=steps).model_dump(mode="json"), queue="cpu").id
        upsert_step_metrics(s, run_id, {i: synthetic_metrics(i, rng) for i in range(1, steps + 1)})
        repo.claim_run(s, run_id, "bench")
        repo.mark_succeeded(s, run_id)
        for _ in range(20):  # a few more runs so the table is not trivially small
            repo.create_run(s, RunConfig().model_dump(mode="json"), queue="cpu")
    return run_id


def bench_http(kind: str, steps: int, clients: int, seconds: float, workers: int) -> list[dict]:
    out = []
    with temp_database(kind, Path(tempfile.mkdtemp())) as url, tempfile.TemporaryDirectory() as data:
        migrate(url)
        run_id = seed_run(url, steps)
        paths = [("metrics, all keys", f"/api/runs/{run_id}/metrics"),
                 ("metrics, 5 keys", f"/api/runs/{run_id}/metrics?keys={FIVE_KEYS}"),
                 ("metrics, 5 keys, max_points=500", f"/api/runs/{run_id}/metrics?keys={FIVE_KEYS}&max_points=500")]
        for cache_mb in (64, 0):
            server = Server(url, workers, cache_mb, data)
            try:
                for label, path in paths:
                    out.append({"db": kind, "what": label, "cache": bool(cache_mb), "workers": workers,
                                **load(server, path, clients, seconds)})
                if cache_mb:
                    out.append({"db": kind, "what": "run read GET /api/runs/{id}", "cache": None, "workers": workers,
                                **load(server, f"/api/runs/{run_id}", clients, seconds)})
            finally:
                server.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["ingest", "http"], default=None)
    ap.add_argument("--db", nargs="+", default=["postgresql"], help="stores for the HTTP part (ingestion runs on both)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--workers", type=int, default=2, help="API worker processes")
    ap.add_argument("--ingest-steps", type=int, default=300)
    ap.add_argument("--train-steps", type=int, default=4, help="tiny-preset steps timed for the step-time reference")
    ap.add_argument("--step-s", type=float, default=None, help="step time to compare ingestion with (skips the trainer)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    report: dict = {"machine": f"{os.cpu_count()} CPUs", "python": sys.version.split()[0]}

    if args.only in (None, "ingest"):
        step_s, metrics, how = (args.step_s, None, "given with --step-s") if args.step_s else measure_step_time(args.train_steps)
        ingest = [bench_ingestion(kind, args.ingest_steps, metrics) for kind in ("sqlite", "postgresql")]
        for row in ingest:
            row["overhead_pct"] = None if step_s is None else 100 * row["mean_ms"] / 1e3 / step_s
        sinks = [r for kind in ("sqlite", "postgresql") if (r := bench_worker_sink(kind, args.ingest_steps, metrics))]
        for row in sinks:
            row["overhead_pct"] = None if step_s is None else 100 * row["blocked_ms_per_step"] / 1e3 / step_s
        report["ingestion"] = {"step_s": step_s, "step_time_source": how, "rows": ingest, "worker_sink": sinks}
        print(f"\nIngestion per step (upsert + progress, committed); step time {step_s and f'{step_s:.3f} s'} ({how})")
        for r in ingest:
            ov = "n/a" if r["overhead_pct"] is None else f"{r['overhead_pct']:.3f}%"
            print(f"  {r['db']:<10} {r['keys']} keys: mean {r['mean_ms']:.2f} ms  p50 {r['p50_ms']:.2f}  p99 {r['p99_ms']:.2f}  -> {ov} of a step")
        for r in sinks:
            ov = "n/a" if r["overhead_pct"] is None else f"{r['overhead_pct']:.4f}%"
            print(f"  worker DbSink on {r['db']:<10}: training thread blocked {r['blocked_ms_per_step']:.3f} ms/step "
                  f"(background writes {r['write_ms_per_step']:.2f} ms/step, {r['flushes']} flushes) -> {ov} of a step")

    if args.only in (None, "http"):
        rows = [r for kind in args.db for r in bench_http(kind, args.steps, args.clients, args.seconds, args.workers)]
        report["http"] = rows
        print(f"\nHTTP, {args.clients} concurrent clients, {args.seconds:g} s each, backend.serve --workers {args.workers}, {args.steps}-step run")
        for r in rows:
            cache = {True: "cache on ", False: "cache off", None: "         "}[r["cache"]]
            print(f"  {r['db']:<10} {r['what']:<34} {cache} {r['rps']:7.0f} req/s  p50 {r['p50_ms']:6.1f}  p95 {r['p95_ms']:6.1f}"
                  f"  p99 {r['p99_ms']:6.1f}  max {r['max_ms']:6.1f} ms  {r['bytes'] / 1024:7.1f} KiB  errors {r['errors']}"
                  f"  server CPU {r['server_cpu_ms_per_request']:.2f} ms/req  load {r['loadavg_1m'][0]:.1f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print("\n" + json.dumps(report))


if __name__ == "__main__":
    main()
