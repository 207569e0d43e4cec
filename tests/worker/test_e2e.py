"""End to end on real processes: a uvicorn API, Celery worker subprocesses, and the real trainer.

- a tiny run submitted over REST is trained by a worker over Redis (PostgreSQL store) and over
  the embedded SQLite broker (SQLite store); its metrics appear step by step, in the store and
  on the SSE stream, and /api/compare answers with ratios;
- crash: the worker's process group is SIGKILLed mid-run; over Redis the message is redelivered
  to a fresh worker, over the embedded broker the reaper re-queues it; either way the run resumes
  from its checkpoint and ends with steps 1..N each stored exactly once;
- frozen worker (SIGSTOP): its heartbeat goes stale, the reaper re-queues the run, another worker
  resumes it, and the thawed worker notices it lost the run and stops without writing;
- cancel: honoured within one step.

Measured timings are printed (run pytest with -s to see them).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time

import httpx
import pytest
from sqlalchemy import func, select

from backend.db.models import Checkpoint
from backend.db.session import session_scope
from tests.worker.runs import run_row, stored_steps

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

STEPS = 4


def read_sse(url: str, out: list[tuple[str, dict]]) -> None:
    """Collect (event, data) from an SSE stream until its `end` event."""
    with httpx.stream("GET", url, timeout=60) as r:
        event = None
        for line in r.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event:
                out.append((event, json.loads(line.split(":", 1)[1])))
                if event == "end":
                    return


@pytest.mark.parametrize("broker", ["redis", "embedded"])
def test_submit_train_stream_compare(broker, platform, request):
    db_url = request.getfixturevalue("pg_url" if broker == "redis" else "sqlite_url")
    p = platform(db_url, broker)
    p.start_api()
    t0 = time.monotonic()
    p.start_worker()
    t_worker = time.monotonic() - t0
    with p.client() as c:
        aero = p.submit(c, method="aero", steps=STEPS)
        grpo = p.submit(c, method="grpo", steps=STEPS)
        events: list[tuple[str, dict]] = []
        sse = threading.Thread(target=read_sse, args=(f"{p.api_url}/api/runs/{aero}/metrics/stream?keys=reward/mean", events))
        sse.start()
        seen_counts = []

        def aero_done():
            body = c.get(f"/runs/{aero}/metrics", params={"keys": "reward/mean"}).json()
            seen_counts.append(body["stored_steps"])
            return c.get(f"/runs/{aero}").json()["status"] in ("succeeded", "failed")

        p.wait(aero_done, 90, "aero run to finish", every=0.1)
        run = c.get(f"/runs/{aero}").json()
        assert run["status"] == "succeeded", run["error"]
        assert (run["current_step"], run["progress"], run["attempts"]) == (STEPS, 1.0, 1)
        sse.join(timeout=30)
        metrics = c.get(f"/runs/{aero}/metrics").json()
        assert metrics["steps"] == list(range(1, STEPS + 1))
        assert {"time/step_s", "reward/mean", "strata/rescue", "flops/total"} <= set(metrics["series"])
        # Step by step: the store held partial runs while it trained, in increasing order.
        partial = sorted({n for n in seen_counts if 0 < n < STEPS})
        assert partial, f"never saw a partial run; counts polled: {seen_counts}"
        assert seen_counts == sorted(seen_counts)
        # ... and the SSE stream delivered each step once, in order, then `end`.
        steps_streamed = [d["step"] for e, d in events if e == "metrics"]
        assert steps_streamed == list(range(1, STEPS + 1)), events
        assert events[-1] == ("end", {"status": "succeeded", "last_step": STEPS})
        assert all(set(d["metrics"]) == {"reward/mean"} for e, d in events if e == "metrics")
        evals = c.get(f"/runs/{aero}/evals").json()
        assert {e["step"] for e in evals["data"]} == {STEPS} and evals["count"] >= 1
        # each step's rollout sample, histograms and system metrics came through the worker's sink
        rollouts = c.get(f"/runs/{aero}/rollouts", params={"step": STEPS}).json()
        assert rollouts["steps"] == list(range(1, STEPS + 1)) and rollouts["count"] > 0
        assert all(r["prompt"] and r["stage"] for r in rollouts["data"])
        assert c.get(f"/runs/{aero}/histograms").json()["steps"] == list(range(1, STEPS + 1))
        assert {"system/cpu_percent", "system/rss_mb"} <= set(c.get(f"/runs/{aero}/metrics/keys").json()["keys"])

        p.wait(lambda: c.get(f"/runs/{grpo}").json()["status"] in ("succeeded", "failed"), 60, "grpo run")
        assert c.get(f"/runs/{grpo}").json()["status"] == "succeeded"
        cmp = c.get("/compare", params={"run_ids": f"{aero},{grpo}", "baseline": grpo}).json()
    assert cmp["baseline"] == grpo
    by_id = {r["run_id"]: r for r in cmp["runs"]}
    a, g = by_id[aero], by_id[grpo]
    assert a["method"] == "aero" and g["method"] == "grpo" and a["steps"] == g["steps"] == STEPS
    numeric = {k: v for k, v in a["ratios"].items() if isinstance(v, (int, float))}
    assert numeric, a["ratios"]
    # Ratios are the run's numbers over the baseline's; the baseline's own are 1.
    assert all(v == pytest.approx(1.0) for k, v in g["ratios"].items() if isinstance(v, (int, float)))
    with session_scope(db_url) as s:
        n_ckpt = s.scalar(select(func.count()).select_from(Checkpoint).where(Checkpoint.run_id == aero))
    assert n_ckpt >= 1
    print(f"\n[{broker}] worker ready in {t_worker:.1f}s; two {STEPS}-step runs done in {time.monotonic() - t0:.1f}s")


def _crash_and_resume(p, db_url: str, recover, lose_run_dir: bool = False, **config) -> dict:
    """Submit a 16-step run (checkpoint every 2), SIGKILL the worker's process group after step 3,
    call ``recover(p)`` (start a worker, maybe the reaper), wait for the run to succeed. 16 steps,
    not 6: a tiny step takes ~0.4 s, and a 6-step run once finished before the kill landed.
    ``lose_run_dir``: delete the run directory after the kill, as a worker on another host that
    does not share it sees it (AERO_MISSING_CHECKPOINT=restart: the run restarts from step 0).
    ``config``: more of the run's config."""
    steps = 16
    p.start_api()
    w1 = p.start_worker("worker1")
    with p.client() as c:
        rid = p.submit(c, **{"method": "aero", "steps": steps, "checkpoint_every": 2, **config})
        p.wait(lambda: run_row(db_url, rid).current_step >= 3, 90, "step 3", w1, every=0.05)
        first_owner = run_row(db_url, rid).worker
        p.kill(w1)
        t_kill = time.monotonic()
        assert run_row(db_url, rid).status == "running", "the run ended before the kill: make it longer"
        before = stored_steps(db_url, rid)
        if lose_run_dir:
            shutil.rmtree(p.tmp / "data" / "runs" / str(rid))
        recover(p)
        p.wait(lambda: run_row(db_url, rid).worker not in (None, first_owner), 90, "another worker to take the run")
        t_taken = time.monotonic() - t_kill
        p.wait(lambda: run_row(db_url, rid).status in ("succeeded", "failed"), 90, "the run to finish")
        t_done = time.monotonic() - t_kill
    run = run_row(db_url, rid)
    assert run.status == "succeeded", run.error
    after = stored_steps(db_url, rid)
    # Steps 1..N, each exactly once (the primary key guarantees "once"; the count proves "each").
    assert [s for s, _ in after] == list(range(1, steps + 1))
    # It resumed from a checkpoint, not from scratch: steps up to the last checkpoint before the
    # kill (>= 2) kept their original rows; the re-done steps were rewritten by the new worker.
    kept = [s for s, ts in after if (s, ts) in set(before)]
    assert run.attempts == 2
    if lose_run_dir:  # restarted from step 0: every row is the second attempt's, none of the first's
        assert kept == [] and "restarting from step 0" in p.logs(400)
        return {"taken_s": t_taken, "done_s": t_done, "resumed_after_step": 0, "steps_before_kill": len(before)}
    assert kept and kept == list(range(1, max(kept) + 1)) and max(kept) >= 2 and max(kept) % 2 == 0
    return {"taken_s": t_taken, "done_s": t_done, "resumed_after_step": max(kept), "steps_before_kill": len(before)}


def test_sigkill_mid_run_redelivered_over_redis(platform, pg_url):
    # A 3 s visibility timeout: the dead worker's unacked message goes back to the queue 3 s
    # after delivery; the next worker takes it at once (its previous owner is a dead pid here).
    p = platform(pg_url, "redis", AERO_VISIBILITY_TIMEOUT_S=3, AERO_STALE_AFTER_S=600)
    timing = _crash_and_resume(p, pg_url, lambda p: p.start_worker("worker2"))
    print(f"\n[redis crash] {timing}")


def test_sigkill_mid_asynchronous_run_resumes_with_each_step_once(platform, pg_url):
    # the sampler runs two steps ahead (offpolicy.max_staleness=2): the steps in flight at the
    # kill are re-sampled from the checkpoint's sampler state, and every step is stored once
    p = platform(pg_url, "redis", AERO_VISIBILITY_TIMEOUT_S=3, AERO_STALE_AFTER_S=600)
    timing = _crash_and_resume(p, pg_url, lambda p: p.start_worker("worker2"), offpolicy={"max_staleness": 2})
    print(f"\n[redis crash, asynchronous run] {timing}")


def test_sigkill_then_resumed_on_a_host_without_the_run_directory_restarts_as_one_attempt(platform, pg_url):
    # The next worker does not see the run directory (not shared across hosts): the store's rows
    # past step 0 (steps, rollouts, checkpoint records) go before it restarts, so the curve is one
    # attempt's, not the first attempt's steps mixed with the second's (docs/deploy.md)
    p = platform(pg_url, "redis", AERO_VISIBILITY_TIMEOUT_S=3, AERO_STALE_AFTER_S=600)
    timing = _crash_and_resume(p, pg_url, lambda p: p.start_worker("worker2"), lose_run_dir=True)
    print(f"\n[redis crash, run directory lost] {timing}")


def test_sigkill_mid_run_recovered_by_reaper_on_embedded_broker(platform, sqlite_url):
    # The SQLite broker has no visibility timeout: the message of a SIGKILLed worker is never
    # handed out again. The reaper sees the owner process is dead, re-queues and re-sends it.
    p = platform(sqlite_url, "embedded", AERO_STALE_AFTER_S=600)

    def recover(p):
        p.start_worker("worker2")
        p._spawn("reaper", [sys.executable, "-m", "worker.reaper", "--interval", "1"])

    timing = _crash_and_resume(p, sqlite_url, recover)
    print(f"\n[embedded crash + reaper] {timing}")


def test_cancel_is_honoured_within_one_step(platform, pg_url):
    p = platform(pg_url, "redis")
    p.start_api()
    p.start_worker()
    with p.client() as c:
        # Steps of ~0.5 s: the store's current_step trails the trainer by one background write
        # (milliseconds), which must stay small next to a step for the bound below to be exact.
        rid = p.submit(c, method="grpo", steps=40, batch_prompts=16, n_total=8)
        p.wait(lambda: run_row(pg_url, rid).current_step >= 1, 60, "step 1", every=0.05)
        r = c.post(f"/runs/{rid}/cancel")
        assert r.status_code == 200 and r.json()["cancel_requested"]
        step_at_cancel = run_row(pg_url, rid).current_step
        t0 = time.monotonic()
        p.wait(lambda: run_row(pg_url, rid).status != "running", 30, "the cancel")
        run = run_row(pg_url, rid)
    assert run.status == "cancelled" and run.finished_at is not None
    assert step_at_cancel <= run.current_step <= step_at_cancel + 1
    assert [s for s, _ in stored_steps(pg_url, rid)] == list(range(1, run.current_step + 1))
    print(f"\n[cancel] stopped at step {run.current_step} (cancel at {step_at_cancel}) in {time.monotonic() - t0:.2f}s")


def test_frozen_worker_stale_heartbeat_is_requeued_by_the_reaper(platform, pg_url):
    # SIGSTOP freezes the owner: its process exists (so it is not "dead") but its heartbeat stops.
    # After AERO_STALE_AFTER_S the reaper re-queues the run; the idle second worker resumes it.
    # Thawed, the first worker finds it lost the run and stops without writing.
    steps = 6
    p = platform(pg_url, "redis", AERO_STALE_AFTER_S=3)
    p.start_api()
    w1, w2 = p.start_worker("worker1"), p.start_worker("worker2")
    with p.client() as c:
        rid = p.submit(c, method="aero", steps=steps, checkpoint_every=2)
        p.wait(lambda: run_row(pg_url, rid).current_step >= 2, 90, "step 2", every=0.05)
        owner_pid = int(run_row(pg_url, rid).worker.split(":")[1])
        frozen = next(w for w in (w1, w2) if os.getpgid(owner_pid) == w.pid)
        os.killpg(frozen.pid, signal.SIGSTOP)
        t_stop = time.monotonic()
        try:
            p._spawn("reaper", [sys.executable, "-m", "worker.reaper", "--interval", "0.5"])
            p.wait(lambda: run_row(pg_url, rid).attempts == 2, 60, "the reaper to re-queue and a worker to claim")
            t_taken = time.monotonic() - t_stop
            p.wait(lambda: run_row(pg_url, rid).status in ("succeeded", "failed"), 90, "the run to finish")
        finally:
            os.killpg(frozen.pid, signal.SIGCONT)
    run = run_row(pg_url, rid)
    assert run.status == "succeeded", run.error
    assert f"run {rid}: worker lost -> queued" in (p.tmp / "reaper.log").read_text()
    p.wait(lambda: "lost ownership" in frozen.log_path.read_text(), 30, "the thawed worker to notice")
    assert [s for s, _ in stored_steps(pg_url, rid)] == list(range(1, steps + 1))
    assert run_row(pg_url, rid).status == "succeeded" and run_row(pg_url, rid).attempts == 2
    print(f"\n[frozen worker] re-queued and claimed {t_taken:.1f}s after SIGSTOP (stale after 3s, sweep 0.5s)")
