"""Pure parts of backend/services/group_curves.py: eval keys, their grid, x at eval steps."""

import pytest

from backend.db.metrics import MetricColumns
from backend.services.group_curves import axis_at_steps, eval_grid, parse_eval_key


def test_parse_eval_key():
    assert parse_eval_key("reward/mean") is None
    assert parse_eval_key("eval/overall/avg_at_k") == ("overall", "avg_at_k")
    assert parse_eval_key("eval/math/aime24/pass_at_k") == ("math/aime24", "pass_at_k")  # benchmark names may hold '/'
    for bad in ("eval/overall", "eval/overall/avg", "eval//avg_at_k"):
        with pytest.raises(ValueError, match="eval/<benchmark>/<metric>"):
            parse_eval_key(bad)


def test_eval_grid_keeps_real_points_until_there_are_too_many():
    assert eval_grid([([0.0, 10.0, 20.0], [1, 2, 3]), ([0.0, 15.0, None], [1, 2, 3])], 10) == [0.0, 10.0, 15.0, 20.0]
    assert eval_grid([([float(i) for i in range(30)], [0.0] * 30)], 10) == pytest.approx([i * 29 / 9 for i in range(10)])


def test_axis_at_steps_starts_at_zero_and_is_empty_without_the_quantity():
    cols = MetricColumns([1, 2, 3], {"flops/total": [2.0, None, 5.0], "time/elapsed_s": [None] * 3, "time/step_s": [1.0, 1.0, 1.0]})
    assert axis_at_steps(cols, "flops") == {0: 0.0, 1: 2.0, 2: 2.0, 3: 7.0}
    assert axis_at_steps(cols, "time") == {0: 0.0, 1: 1.0, 2: 2.0, 3: 3.0}  # running sum of time/step_s
    none = MetricColumns([1, 2], {"flops/total": [None, None], "time/elapsed_s": [None, None], "time/step_s": [None, None]})
    assert axis_at_steps(none, "flops") == {} and axis_at_steps(none, "step") == {0: 0.0, 1: 1.0, 2: 2.0}
