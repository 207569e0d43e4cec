"""Live view latency (issue 14): how long after a step ends its point is visible.

A writer plays the worker: every ``--step-s`` seconds a step "ends" (the time is noted), its
metrics go to the worker's ``DbSink`` (background writer, flush every ``--flush-s``) and its
progress to the run row, as ``worker/runner.py`` does. Against a real ``uvicorn`` API on the
chosen store, it measures, per step, the time from the step's end to

1. its ``metrics`` event arriving on ``GET /api/runs/{id}/metrics/stream`` (SSE; the API polls
   the store every ``AERO_SSE_POLL_S``, ``--poll-s`` here, and on PostgreSQL wakes on the
   store's change notices);
2. its point being drawn on the dashboard's Run detail page (a real ``streamlit run`` and
   Debian's chromium through Playwright; the page's live fragment re-polls every 2 s): the
   largest step among the page's Plotly curves, read every 50 ms;

and, with 20 runs x 2,000 steps in the store, the Compare page over them: cold (fresh API and
dashboard processes, empty caches) and warm (the same page loaded again), up to the moment
its content stops changing.

    python benchmarks/live_latency_bench.py --json runs/live-latency.json
    python benchmarks/live_latency_bench.py --db sqlite --steps 6 --step-s 1 --no-compare  # quick
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from platform_bench import Server, free_port, pct, synthetic_metrics  # noqa: E402

from backend.db import runs as repo  # noqa: E402
from backend.db.migrate import migrate  # noqa: E402
from backend.db.session import session_scope  # noqa: E402
from tests.stores import temp_database  # noqa: E402
from trainer.spec.config import RunConfig  # noqa: E402

CHROMIUM = os.environ.get("AERO_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
LAST_X = """() => Math.max(-1, ...Array.from(document.querySelectorAll('.js-plotly-plot'))
  .flatMap(g => (g.data || []).map(t => (t.x && t.x.length) ? Number(t.x[t.x.length - 1]) : -1)))"""
CONTENT = """() => document.querySelectorAll('.js-plotly-plot').length + ':' +
  (document.querySelector('[data-testid="stMain"]') || document.body).innerText.length"""


def summary(latencies: list[float]) -> dict:
    if not latencies:
        return {"n": 0}
    return {"n": len(latencies), "p50_ms": 1e3 * pct(latencies, 50), "p99_ms": 1e3 * pct(latencies, 99),
            "max_ms": 1e3 * max(latencies), "min_ms": 1e3 * min(latencies)}


class Dashboard:
    """``streamlit run dashboard/app.py`` against an API, on a free port."""

    def __init__(self, api_url: str, data_dir: str):
        self.port = free_port()
        env = {**os.environ, "AERO_API_URL": api_url, "AERO_API_TOKEN": "", "AERO_DATA_DIR": str(Path(data_dir) / "none")}
        cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "dashboard" / "app.py"), "--server.port", str(self.port),
               "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false"]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/_stcore/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError("streamlit did not start")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def browser():
    """(playwright, browser) on Debian's chromium, or (None, None) without one."""
    if not Path(CHROMIUM).exists():
        return None, None
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    return pw, pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


# ------------------------------------------------------------------ 1./2. a live run


def write_steps(url: str, run_id: int, steps: int, step_s: float, flush_s: float, ended: dict[int, float],
                start: threading.Event) -> None:
    """The worker's side: a step ends every ``step_s``; DbSink.log, then the progress heartbeat."""
    from worker.sink import DbSink

    rng = random.Random(0)
    sink = DbSink(url, run_id, flush_s=flush_s)
    start.wait()
    try:
        for step in range(1, steps + 1):
            time.sleep(step_s)
            ended[step] = time.time()
            sink.log(step, synthetic_metrics(step, rng))
            with session_scope(url) as s:
                repo.record_progress(s, run_id, step, steps)
    finally:
        sink.close()


def read_sse(api_url: str, run_id: int, arrived: dict[int, float], stop: threading.Event) -> None:
    """Note when each step's ``metrics`` event arrives."""
    with httpx.stream("GET", f"{api_url}/api/runs/{run_id}/metrics/stream", params={"keys": "reward/mean"},
                      timeout=httpx.Timeout(10, read=None)) as r:
        event = None
        for line in r.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "metrics":
                arrived.setdefault(json.loads(line[5:])["step"], time.time())
            elif line.startswith("data:") and event == "end":
                return
            if stop.is_set():
                return


def watch_page(page, dash_url: str, run_id: int, seen: dict[int, float], until: float) -> None:
    """Read the largest step drawn on the Run detail page every 50 ms."""
    page.goto(f"{dash_url}/run?run={run_id}")
    while time.monotonic() < until:
        try:
            last = int(page.evaluate(LAST_X))
        except Exception:  # noqa: BLE001 - the page is re-rendering
            last = -1
        now = time.time()
        for step in range(max(seen, default=0) + 1, last + 1):
            seen[step] = now
        page.wait_for_timeout(50)


def bench_live(kind: str, steps: int, step_s: float, flush_s: float, poll_s: float, use_browser: bool) -> dict:
    ended: dict[int, float] = {}
    arrived: dict[int, float] = {}
    drawn: dict[int, float] = {}
    with temp_database(kind, Path(tempfile.mkdtemp())) as url, tempfile.TemporaryDirectory() as data:
        migrate(url)
        with session_scope(url) as s:
            run_id = repo.create_run(s, RunConfig(steps=steps).model_dump(mode="json"), queue="cpu").id
            repo.claim_run(s, run_id, "bench")
        os.environ["AERO_SSE_POLL_S"] = str(poll_s)  # read by the API process's settings
        server = Server(url, 1, 64, data)
        dash = Dashboard(f"http://127.0.0.1:{server.port}", data) if use_browser else None
        pw, br = browser() if use_browser else (None, None)
        start, stop = threading.Event(), threading.Event()
        writer = threading.Thread(target=write_steps, args=(url, run_id, steps, step_s, flush_s, ended, start), daemon=True)
        sse = threading.Thread(target=read_sse, args=(f"http://127.0.0.1:{server.port}", run_id, arrived, stop), daemon=True)
        try:
            sse.start()
            writer.start()
            if br is not None:
                page = br.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"{dash.url}/run?run={run_id}")
                page.wait_for_selector("text=No training step has been logged yet", timeout=60_000)
                start.set()
                watch_page(page, dash.url, run_id, drawn, time.monotonic() + steps * step_s + 6)
            else:
                start.set()
            writer.join()
            with session_scope(url) as s:
                repo.mark_succeeded(s, run_id)
            sse.join(timeout=poll_s + 10)
        finally:
            stop.set()
            if br is not None:
                br.close()
                pw.stop()
            if dash is not None:
                dash.stop()
            server.stop()
    sse_lat = [arrived[s] - ended[s] for s in ended if s in arrived]
    page_lat = [drawn[s] - ended[s] for s in ended if s in drawn]
    return {"db": kind, "steps": steps, "step_s": step_s, "sink_flush_s": flush_s, "sse_poll_s": poll_s,
            "sse": summary(sse_lat), "sse_missing": steps - len(sse_lat),
            "run_detail_page": summary(page_lat) if use_browser and br is not None else None,
            "page_missing": (steps - len(page_lat)) if br is not None else None}


# ------------------------------------------------------------------ 3. Compare, 20 runs


def page_ready_s(page, url: str, quiet_s: float = 2.0, timeout_s: float = 120.0) -> float:
    """Seconds from navigation until the page's charts and text last changed (then quiet for
    ``quiet_s``); at least one chart must be drawn."""
    t0 = time.monotonic()
    page.goto(url)
    last, changed = None, t0
    while time.monotonic() - t0 < timeout_s:
        state = page.evaluate(CONTENT)
        now = time.monotonic()
        if state != last:
            last, changed = state, now
        elif not state.startswith("0:") and now - changed >= quiet_s:
            return changed - t0
        page.wait_for_timeout(50)
    raise TimeoutError(f"{url} still changing after {timeout_s} s")


def bench_compare(kind: str, runs: int, steps: int) -> dict | None:
    from tests.dashboard.conftest import add_run  # the dashboard tests' realistic runs (metrics + evals)

    from backend.db.sweeps import create_sweep

    pw, br = browser()
    if br is None:
        return None
    methods = ("grpo", "aero-s1", "aero-s1s2", "aero", "dapo")
    try:
        with temp_database(kind, Path(tempfile.mkdtemp())) as url, tempfile.TemporaryDirectory() as data:
            migrate(url)
            t0 = time.perf_counter()
            with session_scope(url) as s:
                sweep_id = create_sweep(s, "bench", {}).id
            for i in range(runs):
                add_run(url, methods[i % 5], steps=steps, done=steps, status="succeeded", seed=i // 5, sweep_id=sweep_id,
                        evals_at=(steps // 2, steps))
            seed_s = time.perf_counter() - t0
            server = Server(url, 2, 64, data)
            dash = Dashboard(f"http://127.0.0.1:{server.port}", data)
            try:
                page = br.new_page(viewport={"width": 1400, "height": 900})
                target = f"{dash.url}/compare?sweep={sweep_id}"
                cold = page_ready_s(page, target)
                warm = [page_ready_s(page, target) for _ in range(3)]
            finally:
                dash.stop()
                server.stop()
    finally:
        br.close()
        pw.stop()
    return {"db": kind, "runs": runs, "steps": steps, "seed_s": seed_s, "cold_s": cold, "warm_s": warm,
            "note": "time until the page's charts and text last changed (quiet 2 s after)"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", nargs="+", default=["postgresql"])
    ap.add_argument("--steps", type=int, default=40, help="steps of the live run")
    ap.add_argument("--step-s", type=float, default=1.5, help="seconds per step (the tiny preset: ~1-2 s)")
    ap.add_argument("--flush-s", type=float, default=0.25, help="DbSink flush interval (AERO_SINK_FLUSH_S)")
    ap.add_argument("--poll-s", type=float, default=1.0, help="the API's SSE store polling (AERO_SSE_POLL_S)")
    ap.add_argument("--no-browser", action="store_true", help="SSE only")
    ap.add_argument("--no-compare", action="store_true")
    ap.add_argument("--compare-runs", type=int, default=20)
    ap.add_argument("--compare-steps", type=int, default=2000)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    report: dict = {"machine": f"{os.cpu_count()} CPUs", "loadavg_1m_start": os.getloadavg()[0], "live": [], "compare": []}
    for kind in args.db:
        r = bench_live(kind, args.steps, args.step_s, args.flush_s, args.poll_s, not args.no_browser)
        report["live"].append(r)
        print(f"\n{kind}: {r['steps']} steps every {r['step_s']:g} s, sink flush {r['sink_flush_s']:g} s, SSE poll {r['sse_poll_s']:g} s")
        for name in ("sse", "run_detail_page"):
            v = r[name]
            if v and v.get("n"):
                print(f"  step end -> {name:<16} p50 {v['p50_ms']:7.0f} ms  p99 {v['p99_ms']:7.0f} ms  "
                      f"(min {v['min_ms']:.0f}, max {v['max_ms']:.0f}, n {v['n']})")
        if not args.no_compare and not args.no_browser:
            c = bench_compare(kind, args.compare_runs, args.compare_steps)
            if c:
                report["compare"].append(c)
                print(f"  Compare page, {c['runs']} runs x {c['steps']} steps: cold {c['cold_s']:.2f} s, "
                      f"warm {', '.join(f'{w:.2f}' for w in c['warm_s'])} s  (seeded in {c['seed_s']:.0f} s)")
    report["loadavg_1m_end"] = os.getloadavg()[0]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
