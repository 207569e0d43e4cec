"""Prompt memory (trainer/core/memory.py): hand-computed posteriors and discounts, the three
uses (a) explore sizes, (b) pre-allocated rescue, (c) skip with revisit, (d) give up rescue on
hopeless prompts with revisit, the equal budget
checked against AERO's real rescue loop, and an exact state round trip."""

import json
import pickle
from dataclasses import replace

import numpy as np
import pytest
from scipy.special import betainc

from trainer.core.memory import (
    Memory, MemoryRules, Posterior, discount, explore_sizes, from_dict, give_up_mask, hopeless, known_hard, plan_step, preallocate,
    prob_above, recall, remember, revisit_draws, skip_mask, to_dict, update,
)
from trainer.core.rescue import plan_rounds, replay, start_rescue
from trainer.core.strata import Stratum


def _post(alpha, beta, seen=True, visits=None):
    alpha = np.asarray(alpha, dtype=float)
    return Posterior(alpha=alpha, beta=np.asarray(beta, dtype=float), seen=np.broadcast_to(np.asarray(seen), alpha.shape).copy(),
                     visits=None if visits is None else np.asarray(visits))


def test_update_adds_successes_and_failures():
    a, b = update([1.0, 2.5], [1.0, 0.5], [8, 1], [8, 4])
    assert a.tolist() == [9.0, 3.5] and b.tolist() == [1.0, 3.5]
    a, b = update([3.0], [4.0], [0], [0])  # a skipped prompt: unchanged
    assert (a[0], b[0]) == (3.0, 4.0)
    with pytest.raises(ValueError):
        update([1.0], [1.0], [5], [4])


def test_discount_forgets_evidence_toward_the_prior():
    a, b = discount([9.0], [3.0], [2], gamma=0.5, alpha0=1.0, beta0=1.0)
    assert a[0] == pytest.approx(1 + 0.25 * 8) and b[0] == pytest.approx(1 + 0.25 * 2)
    a, b = discount([9.0], [3.0], [7], gamma=1.0, alpha0=1.0, beta0=1.0)
    assert (a[0], b[0]) == (9.0, 3.0)
    a, b = discount([9.0, 9.0], [3.0, 3.0], [1, 0], gamma=0.0, alpha0=2.0, beta0=0.5)
    assert a.tolist() == [2.0, 9.0] and b.tolist() == [0.5, 3.0]  # elapsed 0: nothing decays
    with pytest.raises(ValueError):
        discount([1.0], [1.0], [1], gamma=1.5, alpha0=1.0, beta0=1.0)


def test_prob_above_matches_the_beta_survival_function():
    rng = np.random.default_rng(0)
    a, b, x = rng.uniform(0.1, 80, 300), rng.uniform(0.1, 80, 300), rng.uniform(0.01, 0.99, 300)
    ours = np.array([prob_above(ai, bi, xi) for ai, bi, xi in zip(a, b, x)])
    assert np.abs(ours - (1 - betainc(a, b, x))).max() < 1e-10
    # Beta(a, 1): P(p > t) = 1 - t^a in closed form
    assert prob_above([9.0, 4.5], [1.0, 1.0], 0.8) == pytest.approx([1 - 0.8**9, 1 - 0.8**4.5])


def test_remember_and_recall_discount_by_steps_since_last_seen():
    m = Memory(alpha0=1.0, beta0=1.0, gamma=0.5)
    m = remember(m, ["item 3", None, "item 5"], 3, [8, 8, 0], [8, 8, 0])  # item 5 skipped (n = 0)
    assert m.records == {"item 3": (9.0, 1.0, 3, 1)}  # (alpha, beta, clock, visits)
    post = recall(m, ["item 3", "item 5", None], 5)
    assert post.seen.tolist() == [True, False, False]
    assert post.alpha.tolist() == [1 + 8 * 0.25, 1.0, 1.0] and post.beta.tolist() == [1.0, 1.0, 1.0]
    m2 = remember(m, ["item 3"], 5, [2], [4])  # discount to step 5, then add 2/4
    assert m2.records["item 3"] == (3.0 + 2, 1.0 + 2, 5, 2)
    assert m.records["item 3"] == (9.0, 1.0, 3, 1)  # pure: the old store is untouched
    twice = remember(Memory(gamma=0.5), ["a", "a"], 1, [1, 0], [1, 1])  # a duplicate id: both updates
    assert twice.records["a"] == (2.0, 2.0, 1, 2)
    with pytest.raises(ValueError):
        recall(m2, ["item 3"], 4)  # the clock never runs backwards


def test_explore_sizes_floor_for_confidently_solved_prompts_only():
    post = _post([9.0, 2.0, 50.0, 9.0], [1.0, 1.0, 1.0, 1.0], seen=[True, True, False, True])
    sizes = explore_sizes(post, n_explore=8, n_min=3, tau=0.8, conf=0.8)
    # 9/1: 1 - 0.8^9 = 0.87 > 0.8; 2/1: 0.36; unseen: prior ignored however confident
    assert sizes.tolist() == [3, 8, 8, 3]
    assert explore_sizes(post, 8, 8, 0.8, 0.8).tolist() == [8, 8, 8, 8]
    for bad in (0, 9):
        with pytest.raises(ValueError):
            explore_sizes(post, 8, bad, 0.8, 0.8)


def test_preallocate_reserves_for_known_hard_prompts_within_budget_and_n_max():
    post = _post([1.0, 1.0, 5.0, 1.0, 1.0], [9.0, 33.0, 1.0, 9.0, 1.0], seen=[True, True, True, True, False])
    hard = known_hard(post, hard_mean=0.15)
    assert hard.tolist() == [True, True, False, True, False]
    explore = np.array([8, 8, 8, 28, 8])
    assert preallocate(hard, explore, reserve=4, n_max=30, budget=100).tolist() == [4, 4, 0, 2, 0]
    assert preallocate(hard, explore, reserve=4, n_max=30, budget=6).tolist() == [4, 2, 0, 0, 0]
    assert preallocate(hard, explore, reserve=4, n_max=30, budget=0).tolist() == [0, 0, 0, 0, 0]


def test_revisit_draws_are_seeded_and_per_prompt():
    ids = [f"item {j}" for j in range(2000)]
    d = revisit_draws(7, 12, ids)
    assert np.array_equal(d, revisit_draws(7, 12, ids))
    assert np.array_equal(revisit_draws(7, 12, ids[::-1]), d[::-1])  # independent of batch order
    assert not np.array_equal(d, revisit_draws(7, 13, ids)) and not np.array_equal(d, revisit_draws(8, 12, ids))
    assert ((d >= 0) & (d < 1)).all() and abs(d.mean() - 0.5) < 0.03


def test_skip_confident_prompts_with_revisit_probability():
    ids = [f"item {j}" for j in range(2000)]
    post = _post(np.full(2000, 40.0), np.ones(2000))  # P(p > 0.9) = 1 - 0.9^40 = 0.985
    draws = revisit_draws(0, 1, ids)
    assert skip_mask(post, 0.9, 0.9, 0.0, draws).all()
    assert not skip_mask(post, 0.9, 0.9, 1.0, draws).any()
    revisited = 1 - skip_mask(post, 0.9, 0.9, 0.2, draws).mean()
    assert abs(revisited - 0.2) < 0.03
    unsure = _post([5.0, 40.0], [1.0, 1.0], seen=[True, False])  # 1 - 0.9^5 = 0.41; unseen
    assert not skip_mask(unsure, 0.9, 0.9, 0.0, [0.5, 0.5]).any()


BUDGET = dict(n_total=16, n_explore=8, n_max=32)
RULES = MemoryRules(n_min=4, solved_tau=0.75, solved_conf=0.8, hard_mean=0.15, reserve=4, skip_tau=0.9, skip_conf=0.9,
                    revisit=0.2)


def test_all_options_off_is_aeros_step():
    post = _post(np.array([40.0, 1.0, 3.0]), np.array([1.0, 40.0, 3.0]))
    plan = plan_step(post, replace(RULES, adapt=False, prealloc=False, skip=False), draws=np.zeros(3), **BUDGET)
    assert plan.explore.tolist() == [8, 8, 8] and plan.reserve.tolist() == [0, 0, 0] and not plan.skip.any()
    assert plan.rescue_budget == (16 - 8) * 3
    on = plan_step(post, replace(RULES, adapt=True, prealloc=True, skip=True), draws=np.ones(3) * 0.5, **BUDGET)
    assert on.skip.tolist() == [True, False, False] and on.explore.tolist() == [0, 8, 8]
    assert on.reserve.tolist() == [0, 4, 0] and on.rescue_budget == 24 - 4


@pytest.mark.parametrize("seed", range(25))
def test_a_step_never_generates_more_than_the_equal_budget(seed):
    """Random posteriors and options; then AERO's own rescue loop (all rollouts failing, the
    worst case for the budget) runs from the plan. Generated <= n_total * P every time."""
    rng = np.random.default_rng(seed)
    P, n_total = int(rng.integers(1, 40)), int(rng.integers(4, 20))
    n_explore = int(rng.integers(2, n_total + 1))
    n_max = int(rng.integers(n_explore, 3 * n_total))
    rules = replace(RULES, n_min=int(rng.integers(1, n_explore + 1)), reserve=int(rng.integers(1, 12)))
    post = _post(rng.uniform(0.5, 60, P), rng.uniform(0.5, 60, P), seen=rng.random(P) < 0.8,
                 visits=rng.integers(0, 5, P))
    # the draws in the order the keyword arguments drew them before MemoryRules: the same cases
    adapt, prealloc, skip = bool(rng.random() < 0.7), bool(rng.random() < 0.7), bool(rng.random() < 0.5)
    draws, give_up = rng.random(P), bool(rng.random() < 0.6)
    rules = replace(rules, adapt=adapt, prealloc=prealloc, skip=skip, give_up=give_up, hope_tau=0.3, hope_revisit=0.2,
                    give_up_floor=bool(rng.random() < 0.5))
    plan = plan_step(post, rules, n_total=n_total, n_explore=n_explore, n_max=n_max, draws=draws,
                     hope_draws=rng.random(P))
    assert (plan.explore[~plan.skip] >= rules.n_min).all() and (plan.explore[plan.skip] == 0).all()
    assert (plan.first_call <= max(n_max, n_explore)).all()
    strata = np.where(plan.skip, int(Stratum.HIGH), int(Stratum.RESCUE))  # every sampled prompt fails
    state = start_rescue(strata, n_explore, n_total, P)
    state = type(state)(active=state.active & ~plan.gave_up, produced=plan.first_call.copy(),
                        budget_left=plan.rescue_budget, rescued_at=state.rescued_at)
    generated = int(plan.first_call.sum())
    while True:
        rounds = plan_rounds(state, int(rng.integers(1, 4)), delta_n=2, n_max=n_max, k_max=50)
        if not len(rounds):
            break
        generated += int(rounds.sum())
        state, _ = replay(state, rounds, [np.zeros(int(t)) for t in rounds.sum(0)])
    assert generated <= n_total * P


def test_state_round_trips_exactly_through_json_and_pickle():
    m = Memory(alpha0=1.0, beta0=1.0, gamma=0.98)
    rng = np.random.default_rng(3)
    for clock in range(1, 30):
        ids = [f"item {j}" for j in rng.choice(50, 8, replace=False)]
        n = rng.integers(0, 17, 8)
        m = remember(m, ids, clock, rng.binomial(n, 0.4), n)
    for back in (from_dict(json.loads(json.dumps(to_dict(m)))), from_dict(pickle.loads(pickle.dumps(to_dict(m))))):
        assert back == m
        ids = [f"item {j}" for j in range(50)]
        a, b = recall(m, ids, 40), recall(back, ids, 40)
        assert np.array_equal(a.alpha, b.alpha) and np.array_equal(a.beta, b.beta) and np.array_equal(a.seen, b.seen)
        assert np.array_equal(a.visits, b.visits) and a.visits.max() > 1  # (d)'s epoch count survives too
        rules = replace(RULES, adapt=True, prealloc=True, skip=True, give_up=True, hope_tau=0.6)
        kw = dict(BUDGET, draws=revisit_draws(0, 40, ids), hope_draws=revisit_draws(0, 40, ids, salt="give-up"))
        pa, pb = plan_step(a, rules, **kw), plan_step(b, rules, **kw)
        assert np.array_equal(pa.gave_up, pb.gave_up) and pa.gave_up.any() and pa.rescue_budget == pb.rescue_budget


def test_hopeless_needs_confidence_and_enough_visits():
    # Beta(1, 33) = 0/32 from a uniform prior: P(p > 0.05) = 0.95^33 = 0.184
    post = _post([1.0, 1.0, 1.0, 1.0, 5.0], [33.0, 60.0, 60.0, 60.0, 60.0], seen=[True, True, True, False, True],
                 visits=[3, 3, 1, 3, 3])
    assert hopeless(post, 0.05, 0.8, 2).tolist() == [True, True, False, False, False]  # 0.184 < 0.2
    assert hopeless(post, 0.05, 0.9, 2).tolist() == [False, True, False, False, False]  # 0.184 >= 0.1
    assert not hopeless(_post([1.0], [60.0]), 0.05, 0.8, 1).any()  # no visit counts: never hopeless
    with pytest.raises(ValueError):
        hopeless(post, 0.05, 0.8, 0)


def test_give_up_revisits_with_its_probability():
    P = 4000
    post = _post(np.ones(P), np.full(P, 80.0), visits=np.full(P, 4))
    draws = revisit_draws(7, 3, [f"item {i}" for i in range(P)], salt="give-up")
    assert not np.array_equal(draws, revisit_draws(7, 3, [f"item {i}" for i in range(P)]))  # independent of (c)
    gave_up = give_up_mask(post, 0.05, 0.8, 2, 0.25, draws)
    assert 0.70 < gave_up.mean() < 0.80  # about 1 - 0.25 of the hopeless are left unrescued
    assert give_up_mask(post, 0.05, 0.8, 2, 1.0, draws).sum() == 0 and give_up_mask(post, 0.05, 0.8, 2, 0.0, draws).all()


def test_give_up_removes_rescue_and_its_share_of_the_pool():
    post = _post([1.0, 1.0, 3.0], [80.0, 80.0, 3.0], visits=[3, 1, 3])  # only prompt 0 is hopeless (visits)
    rules = replace(RULES, adapt=False, prealloc=True, skip=False, give_up=True)
    kw = dict(BUDGET, draws=np.zeros(3), hope_draws=np.ones(3))
    plan = plan_step(post, rules, **kw)
    assert plan.gave_up.tolist() == [True, False, False] and plan.explore.tolist() == [8, 8, 8]
    assert plan.reserve.tolist() == [0, 4, 0]  # the given-up prompt gets no (b) reserve either
    assert plan.rescue_budget == (16 - 8) * 2 - 4 and plan.max_rollouts() < 16 * 3
    floor = plan_step(post, replace(rules, give_up_floor=True), **kw)
    assert floor.explore.tolist() == [RULES.n_min, 8, 8]
    assert not plan_step(post, replace(rules, give_up=False), **kw).gave_up.any()
    with pytest.raises(ValueError):
        plan_step(post, rules, **dict(kw, hope_draws=None))


def test_memory_rules_from_config_section():
    from trainer.methods.aero_mem import AEROMemConfig

    sec = AEROMemConfig(n_explore_min=12, reserve=6, skip_tau=0.8, hope_visits=3, give_up_floor=True)
    rules = MemoryRules.from_config(sec, (True, False, True, False), n_explore=8)
    assert (rules.adapt, rules.prealloc, rules.skip, rules.give_up) == (True, False, True, False)  # the switches win
    assert rules.n_min == 8  # n_explore_min capped at aero.n_explore
    assert (rules.reserve, rules.skip_tau, rules.hope_visits, rules.give_up_floor) == (6, 0.8, 3, True)
    assert MemoryRules.from_config(AEROMemConfig(), (False,) * 4, n_explore=8) == MemoryRules()  # defaults agree
    post = _post(np.array([40.0, 1.0, 3.0]), np.array([1.0, 40.0, 3.0]))
    plan = plan_step(post, MemoryRules(), draws=np.zeros(3), **BUDGET)  # every switch off: AERO's step
    assert plan.explore.tolist() == [8, 8, 8] and plan.rescue_budget == (16 - 8) * 3
