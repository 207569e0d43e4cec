"""Compute to reach a fraction of the baseline's gain (trainer/core/reach.py), hand-computed."""

import pytest

from trainer.core.reach import (ReachCurve, cumulative, final_accuracy, first_reach, reach, reach_across_seeds,
                                smoothed, targets)


def test_smoothed_is_a_trailing_mean_over_fewer_at_the_start():
    assert smoothed([0.0, 3.0, 6.0, 9.0], window=3).tolist() == pytest.approx([0.0, 1.5, 3.0, 6.0])


def test_final_is_the_mean_of_the_last_window_evals():
    assert final_accuracy([0.1, 0.2, 0.3, 0.7], window=3) == pytest.approx(0.4)
    assert final_accuracy([], window=3) is None


def test_targets_are_fractions_of_the_gain():
    assert targets(0.3, 0.5, (0.5, 1.0)) == pytest.approx([0.4, 0.5])


def test_one_noisy_spike_does_not_count_as_reaching():
    steps = [0, 10, 20, 30, 40]
    # a single eval at 0.50 (noise) among 0.40s: smoothed 0.433, below the 0.45 target
    assert first_reach(steps, [0.40, 0.40, 0.50, 0.40, 0.40], 0.45) is None
    assert first_reach(steps, [0.40, 0.50, 0.50, 0.50, 0.50], 0.45) == 10  # (0.40 + 0.50) / 2


def test_cumulative_costs_start_at_zero_and_skip_missing():
    assert cumulative([1, 2, 3], [2.0, None, 5.0]) == {0: 0.0, 1: 2.0, 2: 2.0, 3: 7.0}


def _curve(values, flops_per_step, every=10):
    steps = [every * i for i in range(len(values))]
    last = steps[-1]
    flops = cumulative(range(1, last + 1), [flops_per_step] * last)
    secs = cumulative(range(1, last + 1), [flops_per_step / 10] * last)
    rollouts = cumulative(range(1, last + 1), [64 * flops_per_step] * last)  # e.g. a method that generates less
    return ReachCurve(steps, values, {"flops": flops, "seconds": secs, "rollouts": rollouts})


def test_reach_ratio_at_equal_accuracy_and_not_reached_kept():
    grpo = _curve([0.3, 0.35, 0.4, 0.45, 0.5, 0.5, 0.5], 2.0)   # final 0.5, gain 0.2
    aero = _curve([0.3, 0.4, 0.5, 0.5, 0.5, 0.5, 0.5], 1.0)     # faster per step and per eval
    flat = _curve([0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3], 1.0)     # never learns
    r = reach({"grpo": grpo, "aero": aero, "flat": flat}, baseline="grpo")
    assert r["base"] == 0.3 and r["final"] == pytest.approx(0.5) and r["gain"] == pytest.approx(0.2)
    assert [t["accuracy"] for t in r["targets"]] == pytest.approx([0.4, 0.45, 0.48, 0.5])
    # grpo smoothed: .3 .325 .35 .4 .45 .483 .5 -> 0.4 at step 30, 0.48 at 50, 0.5 at 60 (its final)
    assert [x["step"] for x in r["runs"]["grpo"]] == [30, 40, 50, 60]
    # aero smoothed: .3 .35 .4 .467 .5 .5 .5 -> 0.4 at 20, 0.45 at 30, 0.48 at 40, 0.5 at 40
    assert [x["step"] for x in r["runs"]["aero"]] == [20, 30, 40, 40]
    assert r["runs"]["aero"][0]["flops"] == 20.0 and r["runs"]["grpo"][0]["flops"] == 60.0
    assert r["ratios"]["aero"][0]["flops"] == pytest.approx(20 / 60)
    assert r["ratios"]["aero"][3]["seconds"] == pytest.approx(4.0 / 12.0)
    assert [x["reached"] for x in r["runs"]["flat"]] == [False] * 4
    assert r["ratios"]["flat"][0] == {"fraction": 0.5, "flops": None, "seconds": None, "rollouts": None, "tokens": None}
    # rollouts to target (Pilot-Commit's view): the same rule on the rollouts axis; a cost a run
    # never logged (tokens here) is unknown, not zero
    assert r["runs"]["aero"][0]["rollouts"] == 20 * 64 and r["ratios"]["aero"][0]["rollouts"] == pytest.approx(20 / 60)
    assert r["runs"]["aero"][0]["tokens"] is None and r["ratios"]["aero"][0]["tokens"] is None


def test_no_gain_gives_no_targets_and_says_why():
    r = reach({"grpo": _curve([0.4, 0.3, 0.3, 0.3], 1.0)}, baseline="grpo")
    assert r["targets"] == [] and "did not improve" in r["reason"]
    r = reach({"grpo": ReachCurve([10, 20], [0.4, 0.5])}, baseline="grpo")
    assert "step-0" in r["reason"]


def test_across_seeds_counts_reached_and_pairs_ratios_by_seed():
    seeds = []
    for aero_speed in (1.0, 1.0, 0.5):
        grpo = _curve([0.3, 0.4, 0.5, 0.5, 0.5], 2.0)
        aero = _curve([0.3, 0.4, 0.5, 0.5, 0.5] if aero_speed == 1.0 else [0.3, 0.3, 0.3, 0.3, 0.3], 1.0)
        seeds.append(reach({"grpo": grpo, "aero": aero}, baseline="grpo"))
    s = reach_across_seeds(seeds, baseline="grpo")
    assert s["seeds"] == 3 and s["fractions"] == [0.5, 0.75, 0.9, 1.0]
    row = s["runs"]["aero"][0]
    assert (row["reached"], row["of"]) == (2, 3)
    ratio = s["ratios"]["aero"][0]["flops"]
    assert ratio["ratios"] == [pytest.approx(0.5), pytest.approx(0.5), None]
    assert ratio["mean"] == pytest.approx(0.5) and ratio["n"] == 2
