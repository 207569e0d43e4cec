"""Decimation keeps real points, at most max_points, always the last."""

import pytest

from backend.services.downsample import downsample_indices


def test_hand_computed_cases():
    assert downsample_indices(0) == []
    assert downsample_indices(5) == [0, 1, 2, 3, 4]
    assert downsample_indices(10, max_points=4) == [0, 3, 6, 9]
    assert downsample_indices(11, every=3) == [0, 3, 6, 9, 10]
    assert downsample_indices(10, every=3) == [0, 3, 6, 9]
    assert downsample_indices(11, every=3, max_points=3) == [0, 6, 10]  # 5 points, stride ceil(4/2)=2
    assert downsample_indices(7, max_points=1) == [6]
    assert downsample_indices(2000, max_points=500)[:3] == [0, 5, 10]  # stride ceil(1999/499) = 5


@pytest.mark.parametrize("n", [1, 2, 3, 17, 100, 2000, 2001])
@pytest.mark.parametrize("every", [1, 2, 7])
@pytest.mark.parametrize("max_points", [None, 1, 2, 3, 10, 499, 5000])
def test_invariants(n, every, max_points):
    idx = downsample_indices(n, every, max_points)
    assert idx[-1] == n - 1  # last point kept
    assert idx == sorted(set(idx)) and 0 <= idx[0]
    if max_points is not None:
        assert len(idx) <= max_points
    if max_points is None or max_points >= -(-n // every) + 1:
        assert len(idx) == len(set(range(0, n, every)) | {n - 1})  # nothing dropped when it fits
