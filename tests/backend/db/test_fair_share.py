"""The workers' claim rule (backend/db/fair_share.py: fair_order, claim_next), pure and on both
stores: a higher priority first; then the fair share, weighted by the GPUs each owner's running
runs hold (then fewest running, then the owner served longest ago, each owner's oldest run first);
owners at the running quota skipped; and a claim that two workers race for won by exactly one of
them."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from sqlalchemy import update

from backend.db import fair_share
from backend.db import runs as repo
from backend.db.models import Run, utcnow
from backend.db.session import get_engine, make_sessionmaker
from trainer.spec.config import RunConfig

CFG = RunConfig(steps=2).model_dump(mode="json")
T0 = datetime(2026, 1, 1)


def test_fair_order_fewest_running_then_least_recently_served_then_oldest():
    heads = {"alice": 1, "bob": 50, "carol": 60}
    assert fair_share.fair_order(heads, {}, {}, {}) == [1, 50, 60]  # nobody running or served: oldest first
    assert fair_share.fair_order(heads, {}, {"alice": 1}, {}) == [50, 60, 1]  # alice runs one: the others first
    served = {"alice": T0, "bob": T0 + timedelta(minutes=5)}
    assert fair_share.fair_order(heads, {}, {}, served) == [60, 1, 50]  # carol never served, bob served last
    assert fair_share.fair_order(heads, {}, {"alice": 2, "bob": 1}, served, running_cap=2) == [60, 50]  # alice at the cap
    assert fair_share.fair_order({None: 3, "bob": 4}, {}, {None: 1}, {}) == [4, 3]  # runs without an owner: one more owner
    assert fair_share.fair_order({}, {}, {}, {}) == []


def test_fair_order_weighs_owners_by_the_gpus_they_hold_not_their_runs():
    heads = {"alice": 1, "bob": 50, "carol": 60}
    # alice runs one 4-GPU run, bob two 1-GPU runs, carol three CPU runs: by runs alice would go first
    held, running = {"alice": 4, "bob": 2, "carol": 0}, {"alice": 1, "bob": 2, "carol": 3}
    assert fair_share.fair_order(heads, held, running, {}) == [60, 50, 1]
    # equal GPUs: fewer running runs first, then the owner served longest ago
    assert fair_share.fair_order(heads, {"alice": 2, "bob": 2}, {"alice": 2, "bob": 1}, {}) == [60, 50, 1]
    served = {"alice": T0, "bob": T0 + timedelta(minutes=5)}
    assert fair_share.fair_order(heads, {"alice": 2, "bob": 2, "carol": 2}, {}, served) == [60, 1, 50]


def test_fair_order_takes_a_higher_priority_first_whoever_holds_more():
    heads = {"alice": 1, "bob": 50, "carol": 60}
    held = {"alice": 8}
    assert fair_share.fair_order(heads, held, {}, {}, priority={1: 5}) == [1, 50, 60]  # alice's priority 5 first
    assert fair_share.fair_order(heads, held, {}, {}, priority={1: 5, 60: 7}) == [60, 1, 50]
    assert fair_share.fair_order(heads, held, {}, {}, priority={1: 0, 50: 0}) == [50, 60, 1]  # all 0: the fair share
    # the running quota still holds back an owner at it, whatever the priority
    assert fair_share.fair_order(heads, held, {"alice": 1}, {}, running_cap=1, priority={1: 9}) == [50, 60]


def _queue(session, owner: str, n: int, priority: int = 0) -> list[int]:
    ids = [repo.create_run(session, CFG, queue="cpu", owner=owner, priority=priority).id for _ in range(n)]
    session.commit()
    return ids


def test_a_single_run_behind_a_big_sweep_is_next(session):
    sweep = _queue(session, "alice", 30)
    assert fair_share.claim_next(session, "cpu", "w1", ticket=sweep[0]).id == sweep[0]
    session.commit()
    (bobs,) = _queue(session, "bob", 1)
    # alice has one running: the next free worker takes bob's run, whatever message it got
    run = fair_share.claim_next(session, "cpu", "w2", ticket=sweep[1])
    assert run.id == bobs and run.ticket == sweep[1] and run.owner == "bob"
    session.commit()
    assert fair_share.claim_next(session, "cpu", "w3", ticket=sweep[2]).id == sweep[1]  # then alice's oldest again


def test_round_robin_when_nobody_runs(session):
    a = _queue(session, "alice", 3)
    b = _queue(session, "bob", 3)
    order = []
    for i in range(6):  # each run finishes before the next is claimed (one worker)
        run = fair_share.claim_next(session, "cpu", f"w{i}", ticket=i + 1)
        order.append(run.id)
        repo.mark_succeeded(session, run.id)
        session.execute(update(Run).where(Run.id == run.id).values(started_at=utcnow() + timedelta(seconds=i)))
        session.commit()
    assert order == [a[0], b[0], a[1], b[1], a[2], b[2]]
    assert fair_share.claim_next(session, "cpu", "w", ticket=99) is None


def test_other_queues_and_cancel_requests_are_left_alone(session):
    gpu = repo.create_run(session, CFG, queue="gpu", owner="bob")
    (a,) = _queue(session, "alice", 1)
    session.execute(update(Run).where(Run.id == a).values(cancel_requested=True))
    session.commit()
    assert fair_share.claim_next(session, "cpu", "w", ticket=a) is None
    assert fair_share.claim_next(session, "gpu", "w", ticket=gpu.id).id == gpu.id


def test_racing_workers_claim_distinct_runs(db, session):
    ids = set(_queue(session, "alice", 4) + _queue(session, "bob", 4))
    got: list[int | None] = []
    lock, start = threading.Lock(), threading.Barrier(8)

    def worker(i: int) -> None:
        start.wait()
        with make_sessionmaker(get_engine(db))() as s:
            run = fair_share.claim_next(s, "cpu", f"w{i}", ticket=i + 1)
            s.commit()
            rid = None if run is None else run.id
        with lock:
            got.append(rid)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(g for g in got if g is not None) == sorted(ids)  # every run once, none twice


def test_the_gpu_quota_counts_gpus_held_not_runs(session):
    """AERO_QUOTA_RUNNING_GPUS=4: alice's 2-GPU run and 4-GPU run cannot run together (6 > 4), her
    two 2-GPU runs can; bob's runs are his own. The runs' ``gpus`` are what submit stored."""
    big = repo.create_run(session, CFG, queue="cpu", owner="alice", gpus=2)
    huge = repo.create_run(session, CFG, queue="cpu", owner="alice", gpus=4)
    small = repo.create_run(session, CFG, queue="cpu", owner="alice", gpus=2)
    bobs = repo.create_run(session, CFG, queue="cpu", owner="bob", gpus=4)
    session.commit()
    assert fair_share.claim_next(session, "cpu", "w1", ticket=big.id, gpu_cap=4).id == big.id
    session.commit()
    # alice holds 2: her next run (4 GPUs) would make 6, so bob's is next, and then nothing of hers fits
    assert fair_share.claim_next(session, "cpu", "w2", ticket=huge.id, gpu_cap=4).id == bobs.id
    session.commit()
    assert fair_share.claim_next(session, "cpu", "w3", ticket=small.id, gpu_cap=4) is None
    repo.mark_succeeded(session, big.id)
    session.commit()
    assert fair_share.claim_next(session, "cpu", "w4", ticket=small.id, gpu_cap=4).id == huge.id  # 4 fits once 2 are free
    session.commit()
    assert fair_share.claim_next(session, "cpu", "w5", ticket=small.id, gpu_cap=0).id == small.id  # 0 = no quota


def test_the_claim_weighs_gpus_held(session):
    """alice's one 4-GPU run holds more than bob's two 1-GPU runs: bob's next run is claimed first,
    though he runs more runs."""
    a4 = repo.create_run(session, CFG, queue="cpu", owner="alice", gpus=4)
    b1 = [repo.create_run(session, CFG, queue="cpu", owner="bob", gpus=1) for _ in range(2)]
    session.commit()
    for i, rid in enumerate([a4.id, *(r.id for r in b1)]):
        assert repo.claim_run(session, rid, f"w{i}") is not None
    session.commit()
    (alices,) = _queue(session, "alice", 1)
    (bobs,) = _queue(session, "bob", 1)
    assert fair_share.claim_next(session, "cpu", "w9", ticket=alices).id == bobs
    session.commit()
    assert fair_share.claim_next(session, "cpu", "w10", ticket=bobs).id == alices


def test_a_higher_priority_is_claimed_first_within_its_queue(session):
    old = _queue(session, "alice", 2)
    (bobs_low,) = _queue(session, "bob", 1)
    (bobs_high,) = _queue(session, "bob", 1, priority=3)
    gpu = repo.create_run(session, CFG, queue="gpu", owner="carol", priority=10)  # another queue: not a candidate
    session.commit()
    assert fair_share.queued_heads(session, "cpu") == ({"alice": old[0], "bob": bobs_high}, {old[0]: 0, bobs_high: 3})
    order = []
    for i in range(4):
        run = fair_share.claim_next(session, "cpu", f"w{i}", ticket=old[0])
        order.append(run.id)
        session.execute(update(Run).where(Run.id == run.id).values(started_at=utcnow() + timedelta(seconds=i)))
        session.commit()
    # bob's priority-3 run first, although it is the newest; then the fair share (bob runs one, alice none)
    assert order == [bobs_high, old[0], bobs_low, old[1]]
    assert fair_share.claim_next(session, "gpu", "w", ticket=gpu.id).id == gpu.id
