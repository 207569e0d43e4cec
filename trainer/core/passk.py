"""Evaluation metrics from per-problem (n samples, c correct): Avg@k, unbiased Pass@k, bootstrap CI.

Store (n, c) per problem and any k <= n can be recomputed later (docs/metrics.md "Evaluation").
"""

from __future__ import annotations

import numpy as np


def _nc(n, c) -> tuple[np.ndarray, np.ndarray]:
    n = np.atleast_1d(np.asarray(n, dtype=np.int64))
    c = np.atleast_1d(np.asarray(c, dtype=np.int64))
    n, c = np.broadcast_arrays(n, c)
    if (n < 1).any() or (c < 0).any() or (c > n).any():
        raise ValueError("need n >= 1 and 0 <= c <= n for every problem")
    return n, c


def avg_at_k(n, c, per_problem: bool = False):
    """Avg@k: mean over problems of c / n (the expected accuracy of one sample; paper §B.2.1).

    Returns a float, or float[P] per problem when ``per_problem``.
    """
    n, c = _nc(n, c)
    v = c / n
    return v if per_problem else float(v.mean())


def pass_at_k(n, c, k: int, per_problem: bool = False):
    """Unbiased Pass@k (Chen et al. 2021, Codex eq. 1), per problem:

        pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n-c+1}^{n} (1 - k / i)

    and 1 when n - c < k. The product form avoids huge binomials. Vectorised over problems
    with different n via a [P, max n] grid.

    Raises:
        ValueError if k < 1 or k > n for some problem.
    Returns:
        float mean over problems, or float[P] when ``per_problem``.
    """
    n, c = _nc(n, c)
    if k < 1 or (k > n).any():
        raise ValueError(f"need 1 <= k <= n for every problem; got k={k}, min n={int(n.min())}")
    i = np.arange(1, int(n.max()) + 1, dtype=np.float64)[None, :]
    in_range = (i > (n - c)[:, None]) & (i <= n[:, None])
    factors = np.where(in_range, 1.0 - k / i, 1.0)
    v = np.where(n - c < k, 1.0, 1.0 - factors.prod(axis=1))
    return v if per_problem else float(v.mean())


def bootstrap_ci(per_problem_values, iters: int = 1000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean over problems.

    Resample the P problems with replacement ``iters`` times, take each resample's mean, and
    return the (alpha/2, 1 - alpha/2) percentiles. Deterministic for a given seed.
    """
    x = np.asarray(per_problem_values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError("need at least one problem")
    rng = np.random.default_rng(seed)
    means = np.empty(iters)
    chunk = max(1, 1_000_000 // x.size)  # bound memory at ~1M indices
    for start in range(0, iters, chunk):
        size = min(chunk, iters - start)
        means[start : start + size] = x[rng.integers(0, x.size, size=(size, x.size))].mean(axis=1)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)
