"""The soak's command line (``python -m benchmarks.soak``): flags to Options, the run, the report
printed and written; ``--flood-child`` is the flooding user's process (benchmarks/soak/load.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import benchmarks.soak
from benchmarks.soak.harness import run
from benchmarks.soak.load import flood_requests
from benchmarks.soak.options import FAULT_KINDS, Options
from benchmarks.soak.report import print_report, write_json


def parse_faults(spec: str) -> dict[str, int]:
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        kind, _, n = part.partition("=")
        if kind not in FAULT_KINDS:
            raise argparse.ArgumentTypeError(f"unknown fault {kind!r} (one of {', '.join(FAULT_KINDS)})")
        out[kind] = int(n or 1)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--flood-child"]:
        print(json.dumps(asyncio.run(flood_requests(json.load(sys.stdin)))))
        return 0
    d = Options()
    ap = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=benchmarks.soak.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", choices=["postgres", "sqlite"], default=d.store,
                    help="postgres: own PostgreSQL cluster + own Redis; sqlite: the embedded default (SQLite store and broker)")
    ap.add_argument("--database-url", default=None, help="use this existing PostgreSQL store (it is not restarted)")
    ap.add_argument("--workers", type=int, default=d.workers, help="Celery workers, one run each (2 cores: 2-4)")
    ap.add_argument("--users", type=int, default=d.users, help="members submitting runs")
    ap.add_argument("--runs", type=int, default=d.runs, help="runs submitted in all (accepted, 201)")
    ap.add_argument("--sse", type=int, default=d.sse, help="SSE clients following live metric streams")
    ap.add_argument("--pollers", type=int, default=d.pollers, help="clients reading metrics (response cache off)")
    ap.add_argument("--steps", type=int, default=d.steps, help="steps per run (a checkpoint every step)")
    ap.add_argument("--batch-prompts", type=int, default=d.batch_prompts)
    ap.add_argument("--faults", type=parse_faults, default={},
                    help="KIND=N,... of " + ", ".join(FAULT_KINDS) + " (default: 2 of each that applies)")
    ap.add_argument("--no-faults", action="store_true", help="load only")
    ap.add_argument("--seed", type=int, default=d.seed, help="seeds the fault times, the users' choices and the readers")
    ap.add_argument("--pg-port", type=int, default=d.pg_port, help="own PostgreSQL's port (0: a free one)")
    ap.add_argument("--redis-port", type=int, default=d.redis_port, help="own Redis' port (0: a free one)")
    ap.add_argument("--api-port", type=int, default=d.api_port, help="the API's port (0: a free one)")
    ap.add_argument("--redis-persistence", choices=["aof", "none"], default=d.redis_persistence,
                    help="aof: appendonly + appendfsync always (no task lost across a restart); none: --save '' --appendonly no")
    ap.add_argument("--tmpfs-mb", type=int, default=d.tmpfs_mb, help="size of the run directory's tmpfs (0: none, no disk-full fault)")
    ap.add_argument("--disk-full-s", type=float, default=d.disk_full_s, help="how long the disk stays full")
    ap.add_argument("--flood-s", type=float, default=d.flood_s, help="flood duration (0: no flood)")
    ap.add_argument("--flood-rps", type=float, default=d.flood_rps,
                    help="flood requests per second aimed at (the report says what the client reached)")
    ap.add_argument("--rate-limit", type=float, default=d.rate_limit, help="AERO_RATE_LIMIT_PER_S of the API (burst 2x)")
    ap.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes, help="AERO_MAX_BODY_BYTES of the API")
    ap.add_argument("--api-workers", type=int, default=d.api_workers,
                    help="API processes (python -m backend.serve --workers N; the compose file's 2); rate limits are per process")
    ap.add_argument("--worker-nice", type=int, default=None,
                    help="AERO_WORKER_NICE of the workers (default: the platform's, 10; 0 trains at the API's priority)")
    ap.add_argument("--poll-interval-s", type=float, default=d.poll_interval_s, help="each poller's mean pause between reads")
    ap.add_argument("--user-stagger-s", type=float, default=d.user_stagger_s, help="user i starts submitting i times this late")
    ap.add_argument("--duration-s", type=float, default=d.duration_s,
                    help="seconds the submissions and faults are spread over (0: 15 s per fault + 30 s, at least 60)")
    ap.add_argument("--grace-s", type=float, default=d.grace_s, help="seconds after a fault window still excluded from latency")
    ap.add_argument("--stale-after-s", type=float, default=d.stale_after_s, help="AERO_STALE_AFTER_S of the workers and reaper")
    ap.add_argument("--visibility-timeout-s", type=float, default=d.visibility_timeout_s, help="AERO_VISIBILITY_TIMEOUT_S (Redis)")
    ap.add_argument("--max-attempts", type=int, default=d.max_attempts,
                    help="AERO_MAX_ATTEMPTS: above the faults a run can meet, so recovery is tested, not giving up")
    ap.add_argument("--timeout-s", type=float, default=d.timeout_s, help="give up waiting for runs after this (0: from the sizes)")
    ap.add_argument("--base-dir", default=None, help="work directory (default: a new temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, SQLite store) afterwards")
    ap.add_argument("--json", type=Path, default=None, help="also write the report as JSON")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    opts = Options(**{k: getattr(a, k) for k in Options.__dataclass_fields__ if hasattr(a, k)})
    if a.no_faults:
        opts.faults = {k: 0 for k in FAULT_KINDS}
    if opts.store == "sqlite" and opts.database_url:
        ap.error("--database-url is for --store postgres")
    report = run(opts)
    print_report(report)
    if a.json:
        write_json(report, a.json)
    return 1 if report["violations"] else 0
