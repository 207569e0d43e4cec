"""benchmarks/strata_accounting.py: the real method steps on scripted strata outcomes, small."""

from __future__ import annotations

import pytest

from benchmarks.strata_accounting import N_TOTAL, RATIO_KEYS, markdown, run

P, STEPS = 8, 2


@pytest.fixture(scope="module")
def result():
    return run(seeds=(0,), steps=STEPS, prompts=P)


def test_grpo_generates_and_trains_every_row(result):
    for step in result["methods"]["grpo"]["per_seed"]["0"]["steps"]:
        assert step["generated_rows"] == step["trained_rows"] == P * N_TOTAL
        assert step["gen_calls"] == 1
        assert step["total_flops"] == step["rollout_flops"] + step["train_flops"]
        assert step["train_flops"] == pytest.approx(3 * step["rollout_flops"])  # trained = generated, 3 forwards


def test_aero_stays_in_budget_and_trains_fewer_tokens(result):
    aero, grpo = result["methods"]["aero"], result["methods"]["grpo"]
    steps = aero["per_seed"]["0"]["steps"]
    assert len(steps) == STEPS
    assert all(s["generated_rows"] <= P * N_TOTAL and s["trained_rows"] <= s["generated_rows"] for s in steps)
    assert all(s["gen_calls"] >= 1 for s in steps)
    assert aero["mean"]["trained_tokens"] < grpo["mean"]["trained_tokens"]
    assert aero["mean"]["zero_acc_rescue"] <= aero["mean"]["zero_acc_explore"]


def test_ratios_are_the_method_means_divided(result):
    assert set(result["ratios"]) == {"aero/grpo", "dapo/grpo"}
    for name, ratios in result["ratios"].items():
        m = result["methods"][name.split("/")[0]]["mean"]
        for k in RATIO_KEYS:
            assert ratios[k]["n"] == 1
            assert ratios[k]["mean"] == pytest.approx(m[k] / result["methods"]["grpo"]["mean"][k])
    assert "aero/grpo" in markdown(result) and "MODELLED" in markdown(result)
