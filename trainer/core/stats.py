"""Statistics for comparing runs across seeds and problems (issue 6; docs/comparisons.md).

RL results move with the seed (docs/comparisons.md; docs/architecture.md §6), so a comparison
aggregates *seed groups*: runs whose configs differ only by seed. Three questions, three tools:

* how big is a number, across seeds?          -> :func:`mean_ci` (Student-t over seeds)
* how does a curve vary across seeds?          -> :func:`interpolated_band`
* is group A better than B on a benchmark?     -> :func:`paired_permutation_test` (p-value,
  paired over problems, as the paper's Table 1 "Total (P-value)") and :func:`paired_diff_ci`
  (a CI of the difference that also resamples seeds)
* what does AERO cost relative to GRPO?        -> :func:`paired_ratios` (one ratio per seed pair,
  geometric mean)

numpy and scipy only (no torch): the backend imports this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from trainer.core.passk import pass_at_k


def _finite(values: Sequence[float | None]) -> np.ndarray:
    v = np.array([np.nan if x is None else float(x) for x in values], dtype=np.float64)
    return v[np.isfinite(v)]


@lru_cache(maxsize=256)
def t_quantile(alpha: float, df: int) -> float:
    """t_{1-alpha/2, df}, cached (scipy's ppf costs ~0.5 ms a call and a comparison makes hundreds).

    scipy.stats is imported here, not at the top: importing it costs ~0.8 s, and every API process
    imports this module at start whether or not it ever compares seed groups."""
    from scipy import stats as sps

    return float(sps.t.ppf(1 - alpha / 2, df))


def t_halfwidth(std: np.ndarray | float, n: np.ndarray | int, alpha: float = 0.05) -> np.ndarray | float:
    """Half-width of the Student-t interval of a mean: t_{1-alpha/2, n-1} * s / sqrt(n).

    ``std`` is the sample standard deviation (ddof=1). NaN where n < 2.
    """
    n_arr = np.asarray(n, dtype=np.int64)
    t = np.full(n_arr.shape, np.nan)
    for k in np.unique(n_arr[n_arr >= 2]):
        t[n_arr == k] = t_quantile(alpha, int(k) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = t * np.asarray(std) / np.sqrt(n_arr)
    return float(out) if out.ndim == 0 else out


def mean_ci(values: Sequence[float | None], alpha: float = 0.05) -> dict[str, Any]:
    """Mean over seeds with a (1 - alpha) Student-t confidence interval.

        mean ± t_{1-alpha/2, n-1} * s / sqrt(n),   s = sample std (ddof 1)

    The t interval assumes the per-seed values are i.i.d. and roughly normal; with 2-5 seeds
    it is wide on purpose (t_{0.975,1} = 12.7, t_{0.975,2} = 4.30). Missing values (None,
    NaN) are dropped. Returns {"mean", "lo", "hi", "n", "values"}; lo/hi are None when n < 2.
    """
    v = _finite(values)
    n = int(v.size)
    if n == 0:
        return {"mean": None, "lo": None, "hi": None, "n": 0, "values": []}
    m = float(v.mean())
    if n < 2:
        return {"mean": m, "lo": None, "hi": None, "n": 1, "values": v.tolist()}
    h = float(t_halfwidth(v.std(ddof=1), n, alpha))
    return {"mean": m, "lo": m - h, "hi": m + h, "n": n, "values": v.tolist()}


def paired_ratios(pairs: Sequence[tuple[float | None, float | None]], alpha: float = 0.05) -> dict[str, Any]:
    """Ratios value / baseline, one per seed pair, summarised on the log scale.

    Pairing by seed cancels what the two runs of one seed share (the same training stream
    and initial sampling noise); a pair with a missing value or a zero baseline is skipped.
    The summary is the geometric mean with a Student-t interval on log ratios, exponentiated
    back (ratios multiply: 0.5x and 2x are symmetric around 1x on this scale, and the interval
    can never reach 0). Where a ratio is <= 0 (a negative saving, say) logs do not exist and
    the arithmetic mean_ci is used instead. Returns {"mean", "lo", "hi", "n", "values"
    (the usable ratios), "ratios" (per pair, None where skipped), "scale": "log" | "linear"}.
    """
    ratios = [None if v is None or b is None or b == 0 else float(v) / float(b) for v, b in pairs]
    usable = _finite(ratios)
    if usable.size and (usable > 0).all():
        logs = mean_ci(np.log(usable).tolist(), alpha)
        back = {k: None if logs[k] is None else float(np.exp(logs[k])) for k in ("mean", "lo", "hi")}
        return {**back, "n": logs["n"], "values": usable.tolist(), "ratios": ratios, "scale": "log"}
    return {**mean_ci(ratios, alpha), "ratios": ratios, "scale": "linear"}


def problem_scores(per_problem: Sequence[Sequence[int]], metric: str, k: int) -> np.ndarray:
    """Per-problem score from stored (n, c): c / n for "avg_at_k", unbiased Pass@k for "pass_at_k"."""
    nc = np.asarray(per_problem, dtype=np.int64).reshape(-1, 2)
    if metric == "avg_at_k":
        return nc[:, 1] / nc[:, 0]
    if metric == "pass_at_k":
        return pass_at_k(nc[:, 0], nc[:, 1], k, per_problem=True)
    raise ValueError(f"metric must be 'avg_at_k' or 'pass_at_k'; got {metric!r}")


def paired_permutation_test(a: Sequence[float], b: Sequence[float], iters: int = 10_000, seed: int = 0) -> float:
    """Two-sided paired permutation (sign-flip) test of mean(a - b) = 0 over problems.

    a[i], b[i] are the two sides' scores on problem i (seeds already averaged). Under the null
    hypothesis the two labels are exchangeable within each problem, so each difference
    d_i = a_i - b_i is equally likely to carry either sign. The p-value is the share of sign
    assignments whose |sum| reaches the observed |sum(d)|:

        p = #{s in {-1,1}^m : |sum_i s_i d_i| >= |sum_i d_i|} / 2^m     (m = non-zero d_i)

    enumerated exactly when 2^m <= iters, else estimated from ``iters`` random assignments as
    (1 + hits) / (1 + iters) (the observed assignment counts, so p is never 0). Problems with
    d_i = 0 cannot change the sum and are left out. Identical sides give p = 1. Assumes
    problems are independent; treats the averaged seeds as fixed (see :func:`paired_diff_ci`).
    """
    xa, xb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if xa.shape != xb.shape or xa.ndim != 1 or xa.size == 0:
        raise ValueError(f"need two equal-length, non-empty score vectors; got {xa.shape} and {xb.shape}")
    d = xa - xb
    d = d[np.abs(d) > 1e-12]
    m = d.size
    if m == 0:
        return 1.0
    observed = abs(d.sum()) - 1e-9 * (1.0 + np.abs(d).sum())  # float slack: ties count as reaching
    if 2 ** m <= iters:
        signs = 1 - 2 * ((np.arange(2 ** m)[:, None] >> np.arange(m)) & 1)
        return float(np.mean(np.abs(signs @ d) >= observed))
    rng = np.random.default_rng(seed)
    hits, chunk, total = 0, max(1, 250_000 // m), d.sum()
    for start in range(0, iters, chunk):  # chunks of ~250k signs stay in cache
        rows = min(chunk, iters - start)
        plus = np.unpackbits(rng.integers(0, 256, size=(rows, (m + 7) // 8), dtype=np.uint8), axis=1)[:, :m]
        sums = 2.0 * (plus.astype(np.float64) @ d) - total  # sum_i s_i d_i with s_i = +1 where plus, else -1
        hits += int(np.sum(np.abs(sums) >= observed))
    return (1 + hits) / (1 + iters)


def paired_diff_ci(a: np.ndarray, b: np.ndarray, alpha: float = 0.05, iters: int = 1000, seed: int = 0) -> tuple[float, float]:
    """Two-level bootstrap CI of mean_problems(mean_seeds(a) - mean_seeds(b)).

    a: float[Sa, P] per-seed, per-problem scores of one group; b: float[Sb, P] of the other,
    on the same P problems. Each resample draws P problems with replacement (the same draw
    for both sides: paired) and, independently per side, Sa and Sb seeds with replacement,
    so the interval carries problem and seed variance. With one seed per side it is the
    plain paired bootstrap. Percentile interval at (alpha/2, 1 - alpha/2).
    """
    a, b = np.atleast_2d(np.asarray(a, dtype=np.float64)), np.atleast_2d(np.asarray(b, dtype=np.float64))
    if a.shape[1] != b.shape[1] or a.shape[1] == 0:
        raise ValueError(f"both sides need scores on the same problems; got {a.shape} and {b.shape}")
    rng = np.random.default_rng(seed)

    def seed_means(x: np.ndarray) -> np.ndarray:  # [iters, P]: per-problem mean over resampled seeds
        s = x.shape[0]
        return rng.multinomial(s, np.full(s, 1 / s), size=iters) @ x / s

    p = a.shape[1]
    d = seed_means(a) - seed_means(b)
    picks = rng.integers(0, p, size=(iters, p))  # the resampled problems, the same for both sides
    diffs = np.take_along_axis(d, picks, axis=1).mean(axis=1)
    lo, hi = np.quantile(diffs, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def interpolated_band(series: Sequence[tuple[Sequence[float], Sequence[float | None]]], grid: Sequence[float],
                      alpha: float = 0.05) -> dict[str, list]:
    """Mean curve and Student-t band across seeds on a common x grid.

    series: one (x, y) per run, x increasing (step, cumulative FLOPs or wall seconds). Each
    run is linearly interpolated at the grid points inside its own x range (a run is never
    extrapolated: a seed that stopped earlier drops out, so n can fall along the curve).
    Returns {"x", "mean", "lo", "hi", "n"} lists; None where no run covers a point (mean) or
    fewer than two do (lo/hi).
    """
    g = np.asarray(grid, dtype=np.float64)
    ys = np.full((len(series), g.size), np.nan)
    for i, (x_raw, y_raw) in enumerate(series):
        x = np.array([np.nan if v is None else v for v in x_raw], dtype=np.float64)
        y = np.array([np.nan if v is None else v for v in y_raw], dtype=np.float64)
        ok = np.isfinite(x) & np.isfinite(y)
        x, y = x[ok], y[ok]
        if x.size == 0:
            continue
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
        inside = (g >= x[0]) & (g <= x[-1])
        ys[i, inside] = np.interp(g[inside], x, y)
    n = np.isfinite(ys).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, np.nansum(ys, axis=0) / np.maximum(n, 1), np.nan)
        dev = np.where(np.isfinite(ys), ys - mean, 0.0)
        std = np.sqrt((dev ** 2).sum(axis=0) / np.maximum(n - 1, 1))
        h = np.where(n >= 2, t_halfwidth(std, n, alpha), np.nan)

    def listed(v: np.ndarray) -> list[float | None]:
        return [float(t) if np.isfinite(t) else None for t in v]

    return {"x": g.tolist(), "mean": listed(mean), "lo": listed(mean - h), "hi": listed(mean + h), "n": n.astype(int).tolist()}


def grid_for(series: Sequence[tuple[Sequence[float], Sequence[float | None]]], points: int, integer: bool = False) -> list[float]:
    """A common x grid from the smallest to the largest x of any run: ``points`` evenly spaced
    values, or every integer when ``integer`` (steps) and there are at most ``points`` of them."""
    xs = [float(v) for x, _ in series for v in x if v is not None and np.isfinite(v)]
    if not xs:
        return []
    lo, hi = min(xs), max(xs)
    if integer and hi - lo + 1 <= points:
        return [float(v) for v in np.arange(lo, hi + 1)]
    return np.linspace(lo, hi, max(2, points) if hi > lo else 1).tolist()
