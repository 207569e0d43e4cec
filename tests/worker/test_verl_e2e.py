"""verl through the platform, on real processes: a run with ``engine: verl`` submitted over REST
is trained by a Celery worker (started in the verl virtualenv, scripts/test_verl.sh) on verl's
real RayPPOTrainer on the CPU (trainer/verl/plugins); every step is stored once and its
checkpoints are noted in the store; SIGKILLed mid-run (worker, Ray and all), the run is
redelivered over Redis and resumes from verl's checkpoint with no step lost or doubled; a
cancel stops it at a step boundary with a checkpoint."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select

pytest.importorskip("verl")

from backend.db.models import Checkpoint  # noqa: E402
from backend.db.session import session_scope  # noqa: E402

from tests.worker.runs import run_row, stored_steps  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

VERL = dict(engine="verl", device="cpu", batch_prompts=4, n_total=4, max_new_tokens=8, eval_every=0, eval_problems=4,
            eval_n=2, aero=dict(n_explore=2, n_max=4, k_max=2))


def at_step(url: str, run_id: int, step: int) -> bool:
    """The run reached ``step``; a run that ended before it fails the wait at once, with its error."""
    run = run_row(url, run_id)
    assert run.status in ("queued", "running") or run.current_step >= step, f"run {run.status}: {run.error}"
    return run.current_step >= step


def checkpoints(url: str, run_id: int) -> list[int]:
    with session_scope(url) as s:
        return sorted(s.scalars(select(Checkpoint.step).where(Checkpoint.run_id == run_id)).all())


def test_verl_run_over_rest_survives_sigkill_and_resumes(platform, pg_url):
    steps = 4
    p = platform(pg_url, "redis", AERO_VISIBILITY_TIMEOUT_S=3, AERO_STALE_AFTER_S=600)
    p.start_api()
    w1 = p.start_worker("worker1")
    with p.client() as c:
        rid = p.submit(c, method="aero", steps=steps, checkpoint_every=2, **VERL)
        assert c.get(f"/runs/{rid}").json()["queue"] == p.queue  # verl on the CPU: the CPU queue
        p.wait(lambda: at_step(pg_url, rid, 3), 300, "verl step 3", w1, every=0.2)
        keys = {"keys": "rollout/generated,tokens/generated,loss/policy"}
        before = c.get(f"/runs/{rid}/metrics", params=keys).json()
        assert checkpoints(pg_url, rid) == [2]  # announced through the relay once step 2 was stored
        first_owner = run_row(pg_url, rid).worker
        p.kill(w1)
        t_kill = time.monotonic()
        p.start_worker("worker2")
        p.wait(lambda: run_row(pg_url, rid).worker not in (None, first_owner), 120, "another worker to take the run")
        p.wait(lambda: run_row(pg_url, rid).status in ("succeeded", "failed"), 300, "the resumed run to finish")
        t_done = time.monotonic() - t_kill
        run = c.get(f"/runs/{rid}").json()
        after = c.get(f"/runs/{rid}/metrics", params=keys).json()
    assert run["status"] == "succeeded", run["error"]
    assert [s for s, _ in stored_steps(pg_url, rid)] == list(range(1, steps + 1))  # each step exactly once
    assert after["steps"] == list(range(1, steps + 1))
    # resumed from the step-2 checkpoint, not retrained: steps 1-2 are the first worker's (the
    # relay re-forwards them from the run directory), steps 3-4 the second worker's
    for key in keys["keys"].split(","):
        assert after["series"][key][:2] == before["series"][key][:2], key
    logs = p.logs(n=100_000)
    assert "Resuming from" in logs and "global_step_2" in logs
    assert checkpoints(pg_url, rid) == [2, 4] and run["attempts"] == 2
    print(f"\n[verl crash] resumed and finished {t_done:.0f}s after the SIGKILL")


def test_verl_run_cancel_stops_at_a_step_with_a_checkpoint(platform, sqlite_url):
    p = platform(sqlite_url, "embedded")
    p.start_api()
    p.start_worker()
    with p.client() as c:
        rid = p.submit(c, method="grpo", steps=30, checkpoint_every=0, **VERL)
        p.wait(lambda: at_step(sqlite_url, rid, 1), 300, "verl step 1", every=0.2)
        assert c.post(f"/runs/{rid}/cancel").status_code == 200
        p.wait(lambda: run_row(sqlite_url, rid).status != "running", 120, "the cancel")
    run = run_row(sqlite_url, rid)
    assert run.status == "cancelled" and 1 <= run.current_step < 30
    assert [s for s, _ in stored_steps(sqlite_url, rid)] == list(range(1, run.current_step + 1))
    assert checkpoints(sqlite_url, rid) == [run.current_step]  # the stop's own checkpoint
