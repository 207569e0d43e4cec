"""The aero-mem step (trainer/methods/aero_mem.py) against a seeded stand-in engine over a
finite prompt set: with its options off it is AERO; with them on, each step keeps the equal
budget, explores solved prompts with the floor, pre-allocates rescue to hard ones, skips with
revisits, and carries its memory in the sampler's state."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.spec.config import RunConfig
from trainer.methods.spec import get_step
from tests.trainer.methods.keyed import KeyedSampler


def _cfg(method="aero-mem", **mem):
    return RunConfig(method=method, batch_prompts=8, aero_mem=mem)


P_SOLVE = [1.0] * 6 + [0.0] * 6 + [0.5] * 4  # solved, hopeless, partial


def test_with_every_option_off_it_is_aero():
    cfg = _cfg(adapt_explore=False, preallocate=False, skip=False)
    mem, ref = KeyedSampler(P_SOLVE, 8, 0), KeyedSampler(P_SOLVE, 8, 0)
    aero_cfg = cfg.model_copy(update={"method": "aero"})
    for _ in range(5):
        a = get_step(cfg.method)(cfg, mem, np.random.default_rng(1))
        b = get_step(aero_cfg.method)(aero_cfg, ref, np.random.default_rng(1))
        assert np.array_equal(a.rows, b.rows) and np.array_equal(a.advantages, b.advantages) and a.generated == b.generated
        assert {k: v for k, v in a.stats.items() if not k.startswith("memory/")} == b.stats
    assert mem.state["aero_mem"]["clock"] == 5 and len(mem.state["aero_mem"]["memory"]["records"]) == 16


def test_memory_shrinks_exploration_and_preallocates_rescue_within_the_budget():
    cfg = _cfg(gamma=1.0, reserve=4)
    s, rng = KeyedSampler(P_SOLVE, 8, 0), np.random.default_rng(0)
    for step in range(1, 9):  # four epochs of two steps
        counts_before = len(s.counts)
        res = get_step(cfg.method)(cfg, s, rng)
        first = s.counts[counts_before]
        assert res.generated <= cfg.n_total * 8 and sum(c.sum() for c in s.counts[counts_before:]) == res.generated
        if step <= 2:  # the first epoch: nothing known, AERO's sizes
            assert first.tolist() == [8] * 8 and res.stats["memory/known"] == 0
            continue
        solved = s.p_solve[s.batch] == 1.0
        hopeless = s.p_solve[s.batch] == 0.0
        assert (first[solved] == 4).all()  # (a): the floor n_explore_min
        assert (first[hopeless] == 12).all()  # (b): n_explore + reserve in the first call
        assert (first[~solved & ~hopeless] == 8).all()
        assert res.stats["memory/known"] == 8
        assert res.stats["memory/explore_saved"] == 4 * solved.sum()
        assert res.stats["memory/preallocated"] == 4 * hopeless.sum()
    recs = s.state["aero_mem"]["memory"]["records"]
    assert recs["item 0"][0] > 10 and recs["item 0"][1] == 1.0  # all correct, never forgotten
    assert recs["item 6"][0] == 1.0 and recs["item 6"][1] > 50  # all failed, rescued to n_max


def test_skip_with_revisit_and_resume_from_the_state():
    cfg = _cfg("aero-mem-c", gamma=1.0, skip_conf=0.5, revisit=0.25)
    s = KeyedSampler([1.0] * 8, 8, 0)
    skipped = []
    for _ in range(12):
        res = get_step(cfg.method)(cfg, s, np.random.default_rng(0))
        skipped.append(res.stats["memory/skipped"])
        assert res.prompts_used == 8 and res.generated <= cfg.n_total * 8
        assert res.stats["memory/explore_saved"] == 8 * res.stats["memory/skipped"]
    assert skipped[0] == 0 and 2 < np.mean(skipped[1:]) < 8  # skipped, and revisited about 1 in 4
    # an all-skipped step generates and trains nothing
    all_skip = KeyedSampler([1.0] * 8, 8, 0, state=s.state)
    cfg0 = _cfg("aero-mem-c", gamma=1.0, skip_conf=0.5, revisit=0.0)
    res = get_step(cfg0.method)(cfg0, all_skip, np.random.default_rng(0))
    assert res.generated == 0 and len(res.rows) == 0 and all_skip.counts == [] and res.stats["memory/skipped"] == 8


@pytest.mark.parametrize("variant, first", [("aero-mem-a", [4, 8]), ("aero-mem-b", [8, 12])])
def test_ablations_switch_on_one_option(variant, first):
    cfg = _cfg(variant, gamma=1.0)
    s = KeyedSampler([1.0, 0.0], 2, 0)
    for _ in range(3):
        get_step(cfg.method)(cfg, s, np.random.default_rng(0))
    before = len(s.counts)
    get_step(cfg.method)(cfg, s, np.random.default_rng(0))
    by_id = dict(zip(s.batch.tolist(), s.counts[before].tolist()))
    assert [by_id[0], by_id[1]] == first


def test_give_up_stops_rescue_of_hopeless_prompts_but_still_explores_them():
    cfg = _cfg("aero-mem-d", gamma=1.0, hope_revisit=0.0)
    s, rng = KeyedSampler(P_SOLVE, 8, 0), np.random.default_rng(0)
    for step in range(1, 9):  # four epochs of two steps; (d) needs two visits first
        before = len(s.counts)
        res = get_step(cfg.method)(cfg, s, rng)
        assert res.generated <= cfg.n_total * 8
        hopeless = s.p_solve[s.batch] == 0.0
        assert s.counts[before].tolist() == [8] * 8  # (a), (b) off: everyone explored at n_explore
        rescued = sum(c for c in s.counts[before + 1:]) if len(s.counts) > before + 1 else np.zeros(8)
        if step <= 4:
            assert res.stats["memory/gave_up"] == 0 and (rescued[hopeless] > 0).all()  # AERO rescues them
        else:
            assert res.stats["memory/gave_up"] == hopeless.sum() and (rescued[hopeless] == 0).all()
            assert res.stats["memory/rescue_budget"] == (cfg.n_total - 8) * (8 - hopeless.sum())
    again = KeyedSampler(P_SOLVE, 8, 0, state=s.state)  # resumed from the state: still given up
    res = get_step("aero-mem-d")(_cfg("aero-mem-d", gamma=1.0, hope_revisit=1.0), again, rng)
    assert res.stats["memory/gave_up"] == 0  # revisit 1: every hopeless prompt is rescued again
    res = get_step(cfg.method)(cfg, again, rng)
    assert res.stats["memory/gave_up"] == (again.p_solve[again.batch] == 0.0).sum() > 0


def test_aero_mem_abd_combines_a_b_and_d():
    from trainer.methods.aero_mem import options

    assert options(_cfg("aero-mem-abd")) == (True, True, False, True)
    assert options(_cfg("aero-mem-d")) == (False, False, False, True)
    assert options(_cfg("aero-mem", give_up=True, skip=True)) == (True, True, True, True)
    assert options(_cfg("aero-mem")) == (True, True, False, False)  # (d) is off by default
