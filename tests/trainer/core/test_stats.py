"""Seed-group statistics (trainer/core/stats.py): hand-computed intervals, known-answer
significance cases, and the band's interpolation rules."""

import math
import subprocess
import sys

import numpy as np
import pytest

from trainer.core.stats import (
    grid_for,
    interpolated_band,
    mean_ci,
    paired_diff_ci,
    paired_permutation_test,
    paired_ratios,
    problem_scores,
)

T975 = {1: 12.706204736, 2: 4.302652730, 3: 3.182446305}  # Student-t 0.975 quantiles (tables)


def test_mean_ci_by_hand():
    # values 1, 2, 3: mean 2, s = 1, half-width = t_{.975,2} * 1 / sqrt(3)
    out = mean_ci([1.0, 2.0, 3.0])
    h = T975[2] / math.sqrt(3)
    assert out["mean"] == pytest.approx(2.0)
    assert out["lo"] == pytest.approx(2.0 - h, rel=1e-6) and out["hi"] == pytest.approx(2.0 + h, rel=1e-6)
    assert out["n"] == 3 and out["values"] == [1.0, 2.0, 3.0]
    # two seeds 0.4, 0.6: s = sqrt(0.02), half-width = 12.706 * s / sqrt(2) = 12.706 * 0.1
    two = mean_ci([0.4, 0.6])
    assert two["hi"] - two["mean"] == pytest.approx(T975[1] * 0.1, rel=1e-6)
    # a 90% interval is narrower than a 95% one
    assert mean_ci([1.0, 2.0, 3.0], alpha=0.1)["hi"] < out["hi"]


def test_mean_ci_missing_and_single_values():
    assert mean_ci([]) == {"mean": None, "lo": None, "hi": None, "n": 0, "values": []}
    assert mean_ci([None, float("nan")])["n"] == 0
    one = mean_ci([None, 5.0])
    assert one["mean"] == 5.0 and one["lo"] is None and one["hi"] is None and one["n"] == 1
    same = mean_ci([0.3, 0.3, 0.3])
    assert same["lo"] == pytest.approx(0.3) and same["hi"] == pytest.approx(0.3)


def test_paired_ratios_pair_by_pair_on_the_log_scale():
    out = paired_ratios([(1.0, 2.0), (3.0, 4.0), (None, 1.0), (1.0, 0.0)])
    assert out["ratios"] == [0.5, 0.75, None, None] and out["scale"] == "log"
    # geometric mean sqrt(0.5 * 0.75); interval exp(mean(log) ± t * s(log) / sqrt(2))
    logs = [math.log(0.5), math.log(0.75)]
    m, s = sum(logs) / 2, abs(logs[0] - logs[1]) / math.sqrt(2)
    assert out["n"] == 2 and out["mean"] == pytest.approx(math.sqrt(0.375))
    assert out["lo"] == pytest.approx(math.exp(m - T975[1] * s / math.sqrt(2)), rel=1e-6)
    assert out["hi"] == pytest.approx(math.exp(m + T975[1] * s / math.sqrt(2)), rel=1e-6)
    assert out["lo"] > 0  # never reaches 0 on the log scale
    # x and 1/x are symmetric around 1
    sym = paired_ratios([(2.0, 1.0), (1.0, 2.0)])
    assert sym["mean"] == pytest.approx(1.0) and sym["lo"] * sym["hi"] == pytest.approx(1.0)


def test_paired_ratios_fall_back_to_linear_for_non_positive_ratios():
    out = paired_ratios([(-1.0, 2.0), (1.0, 2.0)])
    assert out["scale"] == "linear" and out["mean"] == pytest.approx(0.0) and out["ratios"] == [-0.5, 0.5]
    assert paired_ratios([(None, 1.0)])["n"] == 0


def test_problem_scores_avg_and_pass():
    pp = [[8, 0], [8, 2], [8, 8]]
    assert problem_scores(pp, "avg_at_k", 8).tolist() == [0.0, 0.25, 1.0]
    # pass@2 of (8, 2): 1 - C(6,2)/C(8,2) = 1 - 15/28
    assert problem_scores(pp, "pass_at_k", 2)[1] == pytest.approx(1 - 15 / 28)
    with pytest.raises(ValueError, match="metric"):
        problem_scores(pp, "median", 2)


def test_identical_runs_give_p_one():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 9, size=64) / 8
    assert paired_permutation_test(a, a.copy()) == 1.0


def test_clear_shift_gives_p_near_zero():
    rng = np.random.default_rng(1)
    b = rng.uniform(0.2, 0.6, size=64)
    a = b + 0.2 + rng.normal(0, 0.02, size=64)
    p = paired_permutation_test(a, b, iters=10_000)
    assert p < 0.001
    assert paired_permutation_test(b, a, iters=10_000) == pytest.approx(p)  # two-sided: symmetric


def test_exact_enumeration_small_case():
    # d = (+1, +1, +1): of the 8 sign assignments, two (all +, all -) reach |mean| >= 1 -> p = 2/8
    assert paired_permutation_test([1.0, 1.0, 1.0], [0.0, 0.0, 0.0]) == pytest.approx(0.25)
    # d = (+1, -1): every assignment's |mean| is 0 or 1 >= |0| -> p = 1
    assert paired_permutation_test([1.0, 0.0], [0.0, 1.0]) == pytest.approx(1.0)


def test_noise_only_p_values_are_not_small():
    # under the null, p is roughly uniform: across 40 pairs of noise vectors few are < 0.05
    rng = np.random.default_rng(2)
    ps = [paired_permutation_test(rng.uniform(size=50), rng.uniform(size=50), iters=2000, seed=i) for i in range(40)]
    assert sum(p < 0.05 for p in ps) <= 6
    assert 0.3 < float(np.mean(ps)) < 0.7


def test_permutation_test_rejects_bad_shapes():
    with pytest.raises(ValueError, match="equal-length"):
        paired_permutation_test([1.0, 2.0], [1.0])


def test_paired_diff_ci_single_seed_is_paired_bootstrap():
    rng = np.random.default_rng(3)
    b = rng.uniform(size=(1, 200))
    a = b + 0.1
    lo, hi = paired_diff_ci(a, b)
    assert lo == pytest.approx(0.1) and hi == pytest.approx(0.1)  # constant difference: no spread
    lo, hi = paired_diff_ci(rng.uniform(size=(1, 200)), b)
    assert lo < 0 < hi


def test_paired_diff_ci_widens_with_seed_spread():
    rng = np.random.default_rng(4)
    base = rng.uniform(size=200)
    b = np.stack([base, base])
    a_tight = np.stack([base + 0.1, base + 0.1])
    a_spread = np.stack([base + 0.0, base + 0.2])  # same mean difference, seeds disagree
    w_tight = np.diff(paired_diff_ci(a_tight, b))[0]
    w_spread = np.diff(paired_diff_ci(a_spread, b))[0]
    assert w_spread > w_tight + 0.05
    lo, hi = paired_diff_ci(a_spread, b)
    assert lo <= 0.1 <= hi


def test_band_by_hand():
    # two runs on steps 1..3: y = (0, 1, 2) and (2, 3, 4); mean (1, 2, 3), s = sqrt(2) everywhere
    band = interpolated_band([([1, 2, 3], [0, 1, 2]), ([1, 2, 3], [2, 3, 4])], [1, 2, 3])
    assert band["mean"] == pytest.approx([1, 2, 3]) and band["n"] == [2, 2, 2]
    h = T975[1] * math.sqrt(2) / math.sqrt(2)
    assert band["hi"] == pytest.approx([1 + h, 2 + h, 3 + h])


def test_band_interpolates_and_never_extrapolates():
    # run A covers x in [0, 10], run B only [0, 4]; at x=5 only A counts
    band = interpolated_band([([0, 10], [0.0, 1.0]), ([0, 4], [1.0, 1.0])], [0, 2, 5])
    assert band["mean"] == pytest.approx([0.5, 0.6, 0.5])  # A at 2 is 0.2 -> (0.2 + 1) / 2
    assert band["n"] == [2, 2, 1]
    assert band["lo"][2] is None and band["hi"][2] is None
    # missing y values are skipped, and a point nobody covers is None
    gap = interpolated_band([([1, 2, 3], [0.0, None, 1.0])], [2, 7])
    assert gap["mean"][0] == pytest.approx(0.5) and gap["mean"][1] is None and gap["n"] == [1, 0]


def test_grid_for_steps_and_continuous_axes():
    s = [([1, 2, 3], [0, 0, 0]), ([1, 2, 3, 4, 5], [0] * 5)]
    assert grid_for(s, 200, integer=True) == [1.0, 2.0, 3.0, 4.0, 5.0]
    g = grid_for([([0.0, 1e12], [0, 1])], 5)
    assert g == pytest.approx([0, 2.5e11, 5e11, 7.5e11, 1e12])
    assert len(grid_for([(range(1, 1001), [0] * 1000)], 100, integer=True)) == 100
    assert grid_for([], 10) == []


def test_stats_and_passk_load_without_torch():
    """The backend imports these modules; they must not pull in torch."""
    code = "import sys, trainer.core.stats, trainer.core.passk; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
