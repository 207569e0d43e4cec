import itertools
from math import comb

import numpy as np
import pytest

from trainer.core.passk import avg_at_k, bootstrap_ci, pass_at_k


def _brute(n, c, k):
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_subset_enumeration():
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(_brute(n, c, k), abs=1e-12)


def test_pass_at_k_vectorised_over_problems():
    n = np.array([4, 8, 8, 16, 3])
    c = np.array([1, 0, 8, 5, 2])
    got = pass_at_k(n, c, 3, per_problem=True)
    want = [1 - comb(ni - ci, 3) / comb(ni, 3) for ni, ci in zip(n, c)]
    assert np.allclose(got, want)
    assert pass_at_k(n, c, 3) == pytest.approx(np.mean(want))


def test_pass_at_1_equals_avg_and_k_equals_n():
    n = np.array([8, 8, 5, 10])
    c = np.array([0, 3, 5, 7])
    assert np.allclose(pass_at_k(n, c, 1, per_problem=True), avg_at_k(n, c, per_problem=True))
    assert avg_at_k(n, c) == pytest.approx(np.mean(c / n))
    assert pass_at_k([8, 8], [0, 1], 8, per_problem=True).tolist() == [0.0, 1.0]


def test_pass_at_k_large_n_is_stable():
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001)
    v = pass_at_k(400, 200, 200)
    assert 0.999999 < v <= 1.0


def test_pass_at_k_rejects_k_above_n():
    with pytest.raises(ValueError):
        pass_at_k([8, 4], [1, 1], 5)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 0)
    with pytest.raises(ValueError):
        avg_at_k(4, 5)


def test_bootstrap_ci_contains_mean_and_narrows():
    rng = np.random.default_rng(0)
    small = (rng.random(40) < 0.4).astype(float)
    large = (rng.random(4000) < 0.4).astype(float)
    lo_s, hi_s = bootstrap_ci(small, iters=500, seed=1)
    lo_l, hi_l = bootstrap_ci(large, iters=500, seed=1)
    assert lo_s <= small.mean() <= hi_s and lo_l <= large.mean() <= hi_l
    assert (hi_l - lo_l) < (hi_s - lo_s) / 4
    assert bootstrap_ci(small, iters=200, seed=3) == bootstrap_ci(small, iters=200, seed=3)
    assert bootstrap_ci([0.5] * 10) == (0.5, 0.5)
