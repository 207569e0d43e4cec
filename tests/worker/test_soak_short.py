"""The soak harness (benchmarks/soak/), short: its own API, reaper, two Celery workers and its
own Redis on a private PostgreSQL schema; two users submit eight 4-step runs as sweeps and single
runs (every other submission trains asynchronously, one step off-policy) while SSE clients follow them and pollers read their metrics; a worker is SIGKILLed and
replaced, the API is SIGKILLed and restarted, Redis is SIGKILLed and restarted (append-only file,
fsync always), and a user floods the API. Then every invariant the harness checks must hold:
every run terminal, each succeeded run's steps exactly once (step log, columnar copy, run row,
final checkpoint file), failures only for reasons the harness caused, announced checkpoints that
load, SSE streams that missed no step across the API restart, 429 + Retry-After and 413 for the
flood. The harness cleans up every process and directory it made, also when it fails.

The full soak (all six faults, 200 runs, 50 SSE clients): ``python -m benchmarks.soak --help``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from benchmarks import soak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server (the harness restarts its own)")
def test_short_soak_with_a_worker_kill_an_api_restart_and_a_redis_restart_loses_nothing(pg_url, tmp_path):
    base = tmp_path / "soak"
    opts = soak.Options(store="postgres", database_url=pg_url, workers=2, users=2, runs=8, sse=4, pollers=2,
                        faults={"worker_kill": 1, "api_kill": 1, "redis_restart": 1}, pg_port=0, redis_port=0,
                        tmpfs_mb=0, flood_s=1.0, flood_rps=300, rate_limit=10, duration_s=40, base_dir=str(base), quiet=True,
                        worker_nice=0)  # as the suite's other workers (tests/conftest.py)
    try:
        report = soak.run(opts)
    finally:
        assert not base.exists(), "the harness left its work directory behind"
    assert report["violations"] == [], report["violations"]
    inv = {i["name"]: i for i in report["invariants"]}
    assert inv["terminal"]["checked"] >= 9  # 8 runs + the flooder's (+ any a fault submitted for itself)
    assert inv["succeeded_steps_once"]["checked"] >= 8
    assert report["runs"]["submissions"].get("asynchronous runs", 0) >= 1  # every other submission: k = 1
    assert {"worker_kill", "api_kill", "redis_restart", "flood"} <= set(report["fault_counts"]), report["faults"]
    assert report["flood"]["by_status"].get("429") and report["flood"]["by_status"].get("413")
    # the API ran as compose runs it (2 processes) and told its own time on every read
    assert report["setup"]["api_workers"] == 2 and report["setup"]["worker_nice"] == 0
    reads, app = (report["latency"][k] for k in ("metric_read_ms (uncached, outside windows)",
                                                  "metric_read_app_ms (the API's own time, Server-Timing)"))
    assert app["n"] == reads["n"] > 0 and app["p50"] <= reads["p50"]
    # every process it started is gone: the API, reaper and workers (AERO_DATA_DIR under the base
    # dir in their environment) and redis-server (its --dir)
    leftovers = [p for p in Path("/proc").glob("[0-9]*") if int(p.name) != os.getpid() and str(base) in _proc_text(p)]
    assert not leftovers, [_proc_text(p)[:300] for p in leftovers]


def _proc_text(p: Path) -> str:
    """A process' command line and environment (empty when it is gone or not ours to read)."""
    out = []
    for name in ("cmdline", "environ"):
        try:
            out.append((p / name).read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return " ".join(out)
