"""The arena peers' allocation rules (trainer/core/allocation.py) on hand-computed cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from trainer.core.allocation import (
    adapt_base, fallback, info_gain, knapsack_allocate, prob_nonzero_gradient, qualifies, rollout_probability, spread,
    task_value,
)


def test_task_value_by_hand():
    assert prob_nonzero_gradient(0.5, 2) == pytest.approx(0.5)  # 1 - 1/4 - 1/4
    assert prob_nonzero_gradient(0.1, 3) == pytest.approx(1 - 0.001 - 0.729)
    assert info_gain(1 / 3) == pytest.approx(4 / 27)  # its maximum
    assert task_value(0.5, 4) == pytest.approx((1 - 2 / 16) * 0.125)
    assert task_value(0.0, 32) == 0.0 and task_value(1.0, 32) == 0.0


def test_knapsack_by_hand():
    # Two prompts, budget 8, N in [2, 6]; Value(N, 0.5) = (1 - 2 * 0.5^N) / 8 and
    # Value(N, 0.1) = (1 - 0.1^N - 0.9^N) * 0.081. The five splits sum to
    # (2,6) .1004, (3,5) .1269, (4,4) .1372, (5,3) .1391, (6,2) .1357: the best is (5, 3).
    assert knapsack_allocate([0.5, 0.1], 8, 2, 6).tolist() == [5, 3]
    # Value-zero prompts (never / always solved) keep the floor; the rest goes to p = 0.5.
    assert knapsack_allocate([0.5, 0.0, 1.0], 12, 2, 64).tolist() == [8, 2, 2]
    with pytest.raises(ValueError, match="n_low = 3 need 9"):
        knapsack_allocate([0.5, 0.5, 0.5], 8, 3, 8)


@pytest.mark.parametrize("seed", range(5))
def test_knapsack_is_the_brute_force_optimum(seed):
    rng = np.random.default_rng(seed)
    p = rng.choice([0.0, 0.1, 0.25, 0.5, 0.8, 1.0], 4)
    budget, lo, hi = 16, 2, 7
    got = knapsack_allocate(p, budget, lo, hi)
    best = max((c for c in itertools.product(range(lo, hi + 1), repeat=4) if sum(c) <= budget),
               key=lambda c: float(task_value(p, np.array(c)).sum()))
    assert got.sum() <= budget and lo <= got.min() and got.max() <= hi
    assert task_value(p, got).sum() == pytest.approx(task_value(p, np.array(best)).sum())


def test_fallback_hands_the_rest_to_never_solved_prompts_in_turn():
    assert fallback(np.array([2, 2, 8]), np.array([True, False, False]), 20, 8).tolist() == [8, 2, 8]  # 2 unspent
    assert fallback(np.array([2, 2, 8]), np.array([True, True, False]), 15, 8).tolist() == [4, 3, 8]
    assert fallback(np.array([2, 2]), np.array([False, False]), 10, 8).tolist() == [2, 2]


def test_speed_screen_and_spread():
    assert qualifies(np.array([0, 1, 3, 4]), 4).tolist() == [False, True, True, False]
    assert spread(10, 3, 10).tolist() == [4, 3, 3]
    assert spread(10, 3, 3).tolist() == [3, 3, 3]
    assert spread(10, 0, 3).tolist() == []


def test_greso_probability_and_adaptation():
    assert rollout_probability(np.array([0, 1, 3]), np.array([0.5, 0.5, 0.5])).tolist() == [1.0, 0.5, 0.125]
    assert adapt_base(0.5, 0.2, 0.083, 0.01, 0.05) == pytest.approx(0.49)  # too many easy groups: skip more
    assert adapt_base(0.5, 0.0, 0.083, 0.01, 0.05) == pytest.approx(0.51)
    assert adapt_base(0.05, 1.0, 0.083, 0.01, 0.05) == 0.05 and adapt_base(1.0, 0.0, 0.1, 0.01, 0.05) == 1.0


def test_knapsack_scales_to_large_budgets():
    p = np.linspace(0.0, 1.0, 512)
    counts = knapsack_allocate(p, 512 * 64, 2, 4096)  # 32k rollouts over 512 prompts
    assert counts.sum() == 512 * 64 and counts[0] == 2 and counts[-1] == 2  # p = 0 and p = 1 keep the floor
    # rarely-failing prompts need many rollouts to show a failure: they get more than p = 1/2
    assert counts[np.argmin(np.abs(p - 0.9))] > counts[np.argmin(np.abs(p - 0.5))]


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.9])
def test_task_value_is_concave_in_n(p):
    steps = np.diff(task_value(p, np.arange(1, 64)))
    assert (steps >= 0).all() and (np.diff(steps) <= 1e-15).all()  # what makes the greedy allocation exact
