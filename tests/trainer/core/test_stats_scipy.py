"""trainer/core/stats.py's sign-flip test and paired bootstrap against scipy.stats' own
(permutation_test with permutation_type="samples"; bootstrap, percentile method): the
hand-written versions must answer what the well-kept library answers on the same data."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from trainer.core.stats import paired_diff_ci, paired_permutation_test


def mean_diff(x, y, axis=-1):
    return np.mean(x - y, axis=axis)


def scipy_sign_flip(a, b, n_resamples, seed=0) -> float:
    """scipy's paired permutation p-value: swapping a pair's labels flips the sign of its difference."""
    res = sps.permutation_test((a, b), mean_diff, permutation_type="samples", vectorized=True,
                               n_resamples=n_resamples, alternative="two-sided", random_state=seed)
    return float(res.pvalue)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_exact_sign_flip_p_values_equal_scipys(seed):
    rng = np.random.default_rng(seed)
    a = rng.binomial(8, 0.55, size=12) / 8  # per-problem scores, as Avg@8 gives them
    b = rng.binomial(8, 0.45, size=12) / 8
    if abs((a - b).sum()) < 1e-9:  # scipy's two-sided p at a zero statistic is defined differently
        b[0] = 1.0 - b[0] + 0.125
    ours = paired_permutation_test(a, b, iters=1 << 13)  # 2^12 assignments: enumerated exactly
    theirs = scipy_sign_flip(a, b, n_resamples=np.inf)  # exact as well
    assert ours == pytest.approx(theirs, abs=1e-12)
    assert 0 < ours <= 1


def test_exact_p_value_with_tied_and_zero_differences():
    a = np.array([1.0, 0.5, 0.5, 0.25, 1.0, 0.75, 0.0])
    b = np.array([0.5, 0.5, 0.0, 0.25, 0.5, 0.25, 0.25])  # two zero differences, ties among the rest
    assert paired_permutation_test(a, b, iters=1 << 10) == pytest.approx(scipy_sign_flip(a, b, np.inf), abs=1e-12)


def test_monte_carlo_sign_flip_p_value_agrees_with_scipy():
    rng = np.random.default_rng(7)
    a = rng.normal(0.52, 0.2, size=60)
    b = rng.normal(0.47, 0.2, size=60)  # 2^60 assignments: both sides estimate from random ones
    ours = paired_permutation_test(a, b, iters=20_000, seed=1)
    theirs = scipy_sign_flip(a, b, n_resamples=20_000, seed=2)
    assert 0.001 < theirs < 0.5  # a p-value where Monte Carlo error is visible, not 0 or 1
    assert ours == pytest.approx(theirs, abs=4 * np.sqrt(theirs * (1 - theirs) / 20_000) + 1e-3)


@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_paired_bootstrap_interval_agrees_with_scipy(alpha):
    rng = np.random.default_rng(11)
    a = rng.binomial(4, 0.6, size=150) / 4
    b = rng.binomial(4, 0.5, size=150) / 4
    lo, hi = paired_diff_ci(a[None, :], b[None, :], alpha=alpha, iters=20_000, seed=3)  # one seed a side: plain paired
    res = sps.bootstrap((a - b,), np.mean, method="percentile", confidence_level=1 - alpha, n_resamples=20_000,
                        random_state=4)
    width = res.confidence_interval.high - res.confidence_interval.low
    assert lo == pytest.approx(res.confidence_interval.low, abs=0.05 * width)
    assert hi == pytest.approx(res.confidence_interval.high, abs=0.05 * width)
    assert lo < np.mean(a - b) < hi
