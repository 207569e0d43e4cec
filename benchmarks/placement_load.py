"""Placement under load: RUNS runs submitted at once to one worker that owns GPUS logical GPUs
(``aero worker --gpus 0,..,GPUS-1 -c RUNS``), the tiny preset on the CPU, each run holding one GPU.

It starts its own platform (a throwaway SQLite store and the embedded broker, an API, the
worker) in a temporary directory, submits the runs through the REST API, waits for all of them,
and reads back each run's placement (the Ray GPU ids it held, when it got them, how long it
waited) to report: distinct assignments, collisions (two runs overlapping in time on one GPU:
must be 0), the longest wait, and the hand-over time from a run's end to the start of the run
that took its GPU. Writes JSON with every run's record.

    python benchmarks/placement_load.py [--runs 16] [--gpus 8] [--steps 3] [--json runs/placement.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ts(value: str | None) -> float | None:
    if value is None:
        return None
    dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return (dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)).timestamp()


def intervals(runs: list[dict]) -> list[tuple[int, str, float, float]]:
    """(run id, "node/gpu", from, to) for every GPU each placed run held: from when Ray gave it
    (``placement.placed_at``) to the run's end."""
    out = []
    for r in runs:
        where = r.get("placement") or {}
        end = _ts(r.get("finished_at"))
        if not where.get("gpu_ids") or end is None:
            continue
        for node, ids in zip(where["nodes"], where["gpu_ids"]):
            out += [(r["id"], f"{node}/{gpu}", where["placed_at"], end) for gpu in ids]
    return out


def collisions(ivals: list[tuple[int, str, float, float]]) -> list[tuple[int, int, str]]:
    """Pairs of runs that held one GPU at overlapping times: (run a, run b, gpu)."""
    out = []
    for i, (a, ga, sa, ea) in enumerate(ivals):
        for b, gb, sb, eb in ivals[i + 1:]:
            if a != b and ga == gb and sa < eb and sb < ea:
                out.append((a, b, ga))
    return out


def handovers(ivals: list[tuple[int, str, float, float]]) -> list[float]:
    """Seconds from a run's end to the next run's placement on the same GPU."""
    by_gpu: dict[str, list[tuple[float, float]]] = {}
    for _, gpu, start, end in ivals:
        by_gpu.setdefault(gpu, []).append((start, end))
    gaps = []
    for spans in by_gpu.values():
        spans.sort()
        gaps += [nxt[0] - cur[1] for cur, nxt in zip(spans, spans[1:])]
    return gaps


def summarize(runs: list[dict]) -> dict:
    ivals = intervals(runs)
    waits = [r["placement"]["waited_s"] for r in runs if r.get("placement")]
    gaps = handovers(ivals)
    return {"runs": len(runs), "succeeded": sum(r["status"] == "succeeded" for r in runs),
            "distinct_assignments": len({g for _, g, _, _ in ivals}), "collisions": len(collisions(ivals)),
            "longest_wait_s": round(max(waits, default=0.0), 2),
            "handover_s": {"median": round(statistics.median(gaps), 2) if gaps else None,
                           "max": round(max(gaps), 2) if gaps else None, "n": len(gaps)}}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=16)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import httpx

    from backend.db.migrate import migrate
    from backend.db.session import session_scope
    from backend.db.tokens import create_token
    from tests.worker.conftest import free_port, tiny_config

    tmp = Path(tempfile.mkdtemp(prefix="aero-placement-"))
    url = f"sqlite:///{tmp / 'aero.sqlite'}"
    migrate(url)
    with session_scope(url) as s:
        _, token = create_token(s, "bench")
    env = {**os.environ, "AERO_DATA_DIR": str(tmp / "data"), "DATABASE_URL": url, "AERO_MIGRATE_ON_START": "false",
           "AERO_HEARTBEAT_S": "1", "AERO_BROKER_POLL_S": "0.2", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("REDIS_URL", None)
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "uvicorn", "backend.main:app", "--port", str(port),
                               "--log-level", "warning"], cwd=ROOT, env=env, start_new_session=True,
                              stdout=open(tmp / "api.log", "w"), stderr=subprocess.STDOUT)]
    gpus = ",".join(str(i) for i in range(a.gpus))
    log = tmp / "worker.log"
    procs.append(subprocess.Popen([sys.executable, "-m", "cli.main", "worker", "-Q", "cpu", "-c", str(a.runs),
                                   "--gpus", gpus], cwd=ROOT, env=env, start_new_session=True,
                                  stdout=open(log, "w"), stderr=subprocess.STDOUT))
    api = httpx.Client(base_url=f"http://127.0.0.1:{port}/api", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    try:
        deadline = time.monotonic() + 300
        while "ready." not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline and procs[1].poll() is None, log.read_text()[-3000:]
            time.sleep(0.5)
        cfg = tiny_config(method="grpo", steps=a.steps, checkpoint_every=0, resources={"gpus_per_node": 1})
        t0 = time.time()
        ids = [api.post("/runs", json={"config": cfg}).json()["id"] for _ in range(a.runs)]
        while True:
            runs = [api.get(f"/runs/{i}").json() for i in ids]
            if all(r["status"] in ("succeeded", "failed", "cancelled") for r in runs):
                break
            assert time.monotonic() < deadline + 3600, "runs did not finish within an hour"
            time.sleep(2)
        wall = time.time() - t0
    finally:
        api.close()
        for p in procs:
            with_group = p.pid
            try:
                os.killpg(with_group, signal.SIGTERM)
                p.wait(60)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(with_group, signal.SIGKILL)
    out = {**summarize(runs), "gpus": a.gpus, "steps": a.steps, "wall_s": round(wall, 1),
           "assignments": {r["id"]: (r.get("placement") or {}).get("gpu_ids") for r in runs},
           "records": runs}
    print(json.dumps({k: v for k, v in out.items() if k != "records"}, indent=2))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
