"""Stop `aero up` in the middle of a training run, again and again, and time each stop.

Each cycle starts a fresh `aero up --no-dashboard --demo` (embedded SQLite store and broker,
one worker) in its own data directory, waits until a run has trained a step, waits 0-2 s more
(so the stop lands at different points of a step), sends SIGTERM and times the stop. Counted:
stops the supervisor had to end with SIGKILL ("did not stop in 30s"), and stops in which the
worker's exit guard (worker/exit_guard.py) ended billiard's finalizer hang.

    .venv/bin/python benchmarks/stop_soak.py --cycles 20 [--json stop_soak.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_cycle(i: int, tmp: Path) -> dict:
    data = tmp / f"data{i}"
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(AERO_DATA_DIR=str(data), AERO_BROKER_POLL_S="0.2", AERO_HEARTBEAT_S="1", OMP_NUM_THREADS="1")
    port, log = free_port(), tmp / f"up{i}.log"
    with open(log, "w") as f:
        up = subprocess.Popen([sys.executable, "-m", "cli", "up", "--no-dashboard", "--api-port", str(port), "--demo",
                               "--demo-steps", "200"], cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                runs = httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=2).json()["data"]
                if any((r.get("current_step") or 0) >= 1 for r in runs):
                    break
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError(f"cycle {i}: no run trained a step within 180 s (log {log})")
        time.sleep(float(i % 3))
        t0 = time.monotonic()
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=120)
        stop_s = time.monotonic() - t0
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
    worker_log = (data / "logs" / "worker.log").read_text(errors="replace")
    return {"cycle": i, "stop_s": round(stop_s, 2), "supervisor_killed": "did not stop in" in log.read_text(),
            "exit_guard_fired": "still exiting" in worker_log}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cycles", type=int, default=20)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    cycles = []
    with tempfile.TemporaryDirectory(prefix="aero-stop-soak-") as tmp:
        for i in range(args.cycles):
            c = one_cycle(i, Path(tmp))
            cycles.append(c)
            print(json.dumps(c), flush=True)
    stops = [c["stop_s"] for c in cycles]
    summary = {"cycles": len(cycles), "supervisor_killed": sum(c["supervisor_killed"] for c in cycles),
               "exit_guard_fired": sum(c["exit_guard_fired"] for c in cycles), "stop_s_median": statistics.median(stops),
               "stop_s_max": max(stops)}
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "cycles": cycles}, indent=2))


if __name__ == "__main__":
    main()
