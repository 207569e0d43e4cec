"""Server-side downsampling of metric series for plotting.

Decimation, not aggregation: the points returned are values that were actually logged, so a
curve never shows a number that no step produced, and the last point (the freshest, on a live
run) is always kept.
"""

from __future__ import annotations

import math


def downsample_indices(n: int, every: int = 1, max_points: int | None = None) -> list[int]:
    """Indices of ``n`` ordered points to keep.

    1. ``every``: every ``every``-th point by position (0, every, 2*every, ...).
    2. ``max_points``: if more remain than that, a uniform stride s over them,
       s = ceil((m - 1) / (max_points - 1)) for m remaining, which leaves at most max_points.
    The last point (n - 1) is always kept. Example: n=10, max_points=4 -> [0, 3, 6, 9].
    """
    if n <= 0:
        return []
    if every < 1:
        raise ValueError("every must be >= 1")
    idx = list(range(0, n, every))
    if idx[-1] != n - 1:
        idx.append(n - 1)
    if max_points is None or len(idx) <= max_points:
        return idx
    if max_points < 1:
        raise ValueError("max_points must be >= 1")
    if max_points == 1:
        return [n - 1]
    m = len(idx)
    stride = math.ceil((m - 1) / (max_points - 1))
    kept = idx[0 : m - 1 : stride]
    return kept + [idx[-1]]

