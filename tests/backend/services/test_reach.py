"""backend/services/reach.py without a store: the per-run and per-group blocks built from
ReachCurves (the API tests in tests/backend/api/test_compare_reach_api.py read them from rows)."""

from types import SimpleNamespace

import pytest

from backend.services.groups import Group
from backend.services.reach import groups_reach, run_reach
from trainer.core.reach import ReachCurve, cumulative


def _curve(values, per_step, every=10):
    last = every * (len(values) - 1)
    costs = {"flops": cumulative(range(1, last + 1), [per_step] * last),
             "seconds": cumulative(range(1, last + 1), [per_step / 10] * last)}
    return ReachCurve([every * i for i in range(len(values))], values, costs)


def _run(rid, seed):
    return SimpleNamespace(id=rid, config={"seed": seed})


def test_run_reach_names_runs_by_id_and_inlines_ratios():
    out = run_reach({7: _curve([0.3, 0.5, 0.5, 0.5], 2.0), 8: _curve([0.3, 0.5, 0.5, 0.5], 1.0)}, baseline_id=7)
    assert out["baseline_run_id"] == 7 and out["fractions"] == [0.5, 0.75, 0.9, 1.0]
    first = out["runs"][1]["targets"][0]  # target .4: smoothed .3, .4 -> step 10 for both
    assert (out["runs"][1]["run_id"], first["step"], first["flops"], first["ratio"]["flops"]) == (8, 10, 10.0, 0.5)


def test_groups_reach_reason_when_no_seed_pairs():
    base = Group("b", "grpo", [_run(1, 0)], label="grpo")
    other = Group("a", "aero", [_run(2, 5)], label="aero")
    curves = {1: _curve([0.3, 0.5, 0.5, 0.5], 2.0), 2: _curve([0.3, 0.5, 0.5, 0.5], 1.0)}
    out = groups_reach(curves, [base, other], base)
    assert out["reason"] is None and out["targets"][0]["accuracy"]["mean"] == pytest.approx(0.4)
    assert out["groups"][0]["targets"][0]["ratio"]["flops"]["mean"] == pytest.approx(1.0)
    assert out["groups"][1]["reason"] == "no run shares a seed with the baseline group" and out["groups"][1]["unpaired_run_ids"] == [2]
