"""Fair share and the running quota on real processes: a uvicorn API and Celery workers.

- A single run that bob submits behind alice's many-run sweep starts as soon as alice's
  current run ends (within one run's time), not after the sweep: on PostgreSQL + Redis and on
  SQLite + the embedded broker. Under the broker's FIFO order it would start last.
- With AERO_QUOTA_RUNNING_RUNS=1 and two workers, alice's runs train one at a time and all of
  them finish: the tickets dropped while she was at her quota are made up when a run ends.

Measured timings are printed (pytest -s).
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from backend.db.models import Run
from backend.db.session import session_scope
from backend.db.tokens import create_token
from tests.worker.conftest import tiny_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SWEEP_RUNS = 6


def member(url: str, name: str) -> dict[str, str]:
    with session_scope(url) as s:
        _, tok = create_token(s, name, "member")
    return {"Authorization": f"Bearer {tok}"}


def runs_of(url: str) -> list[Run]:
    with session_scope(url) as s:
        return list(s.scalars(select(Run).order_by(Run.id)))


@pytest.mark.parametrize("store", ["postgresql", "sqlite"])
def test_single_run_behind_another_users_sweep_starts_within_one_run(store, platform, request):
    url = request.getfixturevalue("pg_url" if store == "postgresql" else "sqlite_url")
    p = platform(url, "redis" if store == "postgresql" else "embedded")
    p.start_api()
    p.start_worker()
    alice, bob = member(url, "alice"), member(url, "bob")
    with p.client() as c:
        base = tiny_config(method="grpo", steps=4)
        r = c.post("/sweeps", json={"methods": ["grpo"], "seeds": list(range(SWEEP_RUNS)), "base": base}, headers=alice)
        assert r.status_code == 201, r.text
        p.wait(lambda: any(x.status == "running" for x in runs_of(url)), 90, "alice's first run to start")
        r = c.post("/runs", json={"config": tiny_config(method="grpo", steps=4)}, headers=bob)
        assert r.status_code == 201, r.text
        bobs = r.json()["id"]
        p.wait(lambda: next(x for x in runs_of(url) if x.id == bobs).status == "succeeded", 180, "bob's run")
    runs = runs_of(url)
    b = next(x for x in runs if x.id == bobs)
    sweep = [x for x in runs if x.owner == "alice"]
    # Judged from the timestamps, not from when this test's poll saw "running": a 4-step run
    # can end, and the next one start, between that poll and bob's submit.
    queued = [x for x in sweep if x.started_at is None or x.started_at > b.created_at]
    in_progress = [x for x in sweep if x not in queued and (x.finished_at is None or x.finished_at > b.created_at)]
    between = [x for x in queued if x.started_at is not None and x.started_at < b.started_at]
    timeline = [(x.id, x.status, x.started_at, x.finished_at) for x in sweep] + [("bob", b.created_at, b.started_at)]
    assert len(queued) >= 2, timeline  # bob was behind a queue: FIFO would start these first
    assert len(in_progress) <= 1, timeline  # one worker
    # Bob's run starts next: no queued alice run before it, bar one the worker may have claimed
    # while bob's insert was committing (FIFO would put every queued run here).
    assert len(between) <= 1, timeline
    ahead = in_progress + between
    assert all(x.finished_at is not None and x.finished_at <= b.started_at for x in ahead), timeline
    busy = sum((x.finished_at - x.started_at).total_seconds() for x in ahead)
    waited = (b.started_at - b.created_at).total_seconds()
    assert waited <= busy + 10, (waited, busy, timeline)
    print(f"\n[fair share {store}] bob waited {waited:.1f}s behind a {SWEEP_RUNS}-run sweep, "
          f"{len(queued)} of its runs queued; {len(ahead)} run(s) ahead of him took {busy:.1f}s")


def test_running_quota_keeps_a_user_to_one_run_at_a_time_and_all_finish(platform, pg_url):
    p = platform(pg_url, "redis", AERO_QUOTA_RUNNING_RUNS=1)
    p.start_api()
    p.start_worker("worker1")
    p.start_worker("worker2")
    alice = member(pg_url, "alice")
    with p.client() as c:
        r = c.post("/sweeps", json={"methods": ["grpo"], "seeds": [0, 1, 2], "base": tiny_config(method="grpo", steps=3)},
                   headers=alice)
        assert r.status_code == 201, r.text
        p.wait(lambda: all(x.status == "succeeded" for x in runs_of(pg_url)), 200, "all of alice's runs")
    spans = sorted((x.started_at, x.finished_at) for x in runs_of(pg_url))
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start, spans  # never two of hers at once, though a second worker was idle
    print(f"\n[running quota] 3 runs one at a time in {(spans[-1][1] - spans[0][0]).total_seconds():.1f}s")
