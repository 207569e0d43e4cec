"""Rollout allocation math of the arena's peers (trainer/methods/knapsack.py, speed.py, greso.py;
docs/algorithms.md "Rollout allocation: the arena's peers"). Pure numpy, no torch: each function is one rule of its paper,
tested on hand-computed cases in tests/trainer/core/test_allocation.py.

- Knapsack RL (Li et al. 2025, arXiv 2509.25849, §3): a prompt's value under N rollouts,
  and the knapsack that spreads a fixed budget over the prompts (solved greedily, exact
  because the value is concave in N).
- SPEED-RL (Zhang et al. 2025, arXiv 2506.09016, §4): which screened prompts qualify, and
  how the rest of the budget is spread over them.
- GRESO (Zheng et al. 2025, arXiv 2506.02177, §4, Algorithm 1): the probability of rolling
  out a prompt after a streak of zero-variance visits, and the adaptive update of that base.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


# ---------------------------------------------------------------- Knapsack RL (arXiv 2509.25849 §3)


def prob_nonzero_gradient(p: np.ndarray | float, N: np.ndarray | int) -> np.ndarray:
    """P(a group of N Bernoulli(p) rollouts is neither all-correct nor all-wrong), the chance a
    GRPO group gives a gradient:  1 - p^N - (1 - p)^N  (Knapsack RL §3, "task value")."""
    p, N = np.asarray(p, dtype=float), np.asarray(N, dtype=float)
    return 1.0 - p ** N - (1.0 - p) ** N


def info_gain(p: np.ndarray | float) -> np.ndarray:
    """The expected rise of the success rate from one effective update, p (1 - p)^2
    (Knapsack RL §3, "InfoGain"): zero at p = 0 and p = 1, largest at p = 1/3."""
    p = np.asarray(p, dtype=float)
    return p * (1.0 - p) ** 2


def task_value(p: np.ndarray | float, N: np.ndarray | int) -> np.ndarray:
    """Value(N, p) = (1 - p^N - (1 - p)^N) * p (1 - p)^2 (Knapsack RL §3): what N rollouts of a
    prompt of success rate p are worth. Increasing in N, zero for p in {0, 1}."""
    return prob_nonzero_gradient(p, N) * info_gain(p)


def knapsack_allocate(p: Sequence[float], budget: int, n_low: int, n_high: int) -> np.ndarray:
    """int[P]: rollouts per prompt maximising sum_i Value(N_i, p_i) subject to sum_i N_i <= budget
    and n_low <= N_i <= n_high (Knapsack RL §3: items of cost N_i and value Value(N_i, p_i), one
    choice of N per prompt).

    Solved exactly by greedy marginal allocation: Value is concave in N (its increment
    Value(N + 1) - Value(N) = p (1 - p)^2 (p^N (1 - p) + (1 - p)^N p) falls as N grows), and for a
    separable concave objective under one budget, giving each next rollout to the prompt with
    the largest increment is optimal. From the floors, at most budget - P * n_low heap steps,
    instead of a dynamic program over the whole budget. Only strictly positive
    increments are taken (ties to the earlier prompt), so prompts of value zero (p in {0, 1})
    keep the floor and what remains is left for :func:`fallback`. Raises ValueError when even
    the floors do not fit (P * n_low > budget)."""
    import heapq

    rate = np.asarray(p, dtype=float)
    P = len(rate)
    if P * n_low > budget:
        raise ValueError(f"{P} prompts at n_low = {n_low} need {P * n_low} rollouts; the budget is {budget}")
    out = np.full(P, n_low, dtype=np.int64)

    pr = rate.tolist()

    def gain(i: int) -> float:  # Value(N + 1, p) - Value(N, p) in closed form (plain floats: the hot loop)
        a, b, n = pr[i], 1.0 - pr[i], int(out[i])
        return a * b * b * (a ** n * b + b ** n * a)

    heap = [(-gain(i), i) for i in range(P) if out[i] < n_high]
    heapq.heapify(heap)
    left = budget - P * n_low
    while left > 0 and heap and -heap[0][0] > 1e-15:
        _, i = heapq.heappop(heap)
        out[i] += 1
        left -= 1
        if out[i] < n_high:
            heapq.heappush(heap, (-gain(i), i))
    return out


def fallback(counts: np.ndarray, never_solved: np.ndarray, budget: int, n_high: int) -> np.ndarray:
    """Hand the budget the knapsack left unspent to the never-solved prompts (p = 0, value zero),
    one rollout each in turn up to n_high (Knapsack RL §4, the fallback for unsolved tasks).
    What still remains (no never-solved prompt, or all at n_high) stays unspent."""
    out = np.asarray(counts, dtype=np.int64).copy()
    idx = np.flatnonzero(never_solved)
    left = budget - int(out.sum())
    while left > 0 and len(idx):
        room = idx[out[idx] < n_high]
        if not len(room):
            break
        take = room[: left]
        out[take] += 1
        left -= len(take)
    return out


# ---------------------------------------------------------------- SPEED-RL (arXiv 2506.09016 §4)


def qualifies(correct: np.ndarray, n_screen: np.ndarray | int) -> np.ndarray:
    """bool[P]: screened prompts of intermediate difficulty, 0 < c < n_screen (SPEED §4: a pass
    rate of 0 or 1 on the screening rollouts drops the prompt; its SNR is ~0, §3 Thm. 3.1)."""
    c = np.asarray(correct)
    return (c > 0) & (c < n_screen)


def spread(budget: int, k: int, cap: int) -> np.ndarray:
    """int[k]: ``budget`` rollouts spread evenly over k prompts (the first ``budget % k`` get one
    more), none above ``cap``; the rest stays unspent."""
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    out = np.full(k, budget // k, dtype=np.int64)
    out[: budget % k] += 1
    return np.minimum(out, cap)


# ---------------------------------------------------------------- GRESO (arXiv 2506.02177 §4, Alg. 1)


def rollout_probability(streak: np.ndarray, base: np.ndarray) -> np.ndarray:
    """P(roll out a prompt) = base^z after z consecutive zero-variance visits (GRESO §4.1,
    "probabilistic pre-rollout filtering"); z = 0 always rolls out. ``base`` is p_easy for a
    prompt whose last group was all-correct, p_hard for all-wrong."""
    return np.asarray(base, dtype=float) ** np.asarray(streak, dtype=float)


def adapt_base(base: float, observed: float, target: float, step: float, lo: float, hi: float = 1.0) -> float:
    """GRESO §4.2 (adaptive exploration probability): lower the base by ``step`` when the
    observed share of zero-variance prompts of its kind exceeds the target, raise it otherwise;
    clipped to [lo, hi]."""
    return float(min(hi, max(lo, base - step if observed > target else base + step)))
