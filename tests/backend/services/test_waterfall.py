"""Waterfall arithmetic on hand-made numbers: baseline - s1 - s2 - s3 = final, both sources."""

import pytest

from backend.services.waterfall import counterfactual_waterfall, measured_waterfall, missing_rungs, waterfalls


def test_counterfactual_uses_the_strategies_of_the_method():
    mean = {"tokens/trained": 40.0, "savings/s1_tokens": 30.0, "savings/s2_tokens": 20.0, "savings/s3_tokens": 10.0,
            "rollout/trained": 20.0, "savings/s1_rollouts": 24.0, "savings/s2_rollouts": 12.0, "savings/s3_rollouts": 8.0}
    wf = counterfactual_waterfall(mean, "aero")
    assert wf["tokens"] == {"baseline": 100.0, "s1": 30.0, "s2": 20.0, "s3": 10.0, "final": 40.0}
    assert wf["rollouts"] == {"baseline": 64.0, "s1": 24.0, "s2": 12.0, "s3": 8.0, "final": 20.0}
    assert set(wf) == {"tokens", "rollouts"}  # no flops/seconds logged
    s1 = counterfactual_waterfall(mean, "aero-s1")["tokens"]
    assert s1 == {"baseline": 70.0, "s1": 30.0, "s2": None, "s3": None, "final": 40.0}
    assert counterfactual_waterfall(mean, "aero-s1s2")["tokens"]["baseline"] == 90.0
    assert counterfactual_waterfall(mean, "grpo") is None and counterfactual_waterfall(mean, "dapo") is None
    assert counterfactual_waterfall({"tokens/trained": 1.0}, "aero") is None


def test_measured_from_the_ladder_averages_seeds():
    by = {"grpo": [{"tokens/trained": 100.0, "time/step_s": 2.0}, {"tokens/trained": 120.0, "time/step_s": 4.0}],
          "aero-s1": [{"tokens/trained": 70.0, "time/step_s": 2.5}],
          "aero-s1s2": [{"tokens/trained": 50.0, "time/step_s": 2.0}],
          "aero": [{"tokens/trained": 40.0, "time/step_s": 1.5}]}
    wf = measured_waterfall(by)
    assert wf["tokens"] == {"baseline": 110.0, "s1": 40.0, "s2": 20.0, "s3": 10.0, "final": 40.0}
    assert wf["step_seconds"] == pytest.approx({"baseline": 3.0, "s1": 0.5, "s2": 0.5, "s3": 0.5, "final": 1.5})
    for unit in wf.values():
        assert unit["baseline"] - unit["s1"] - unit["s2"] - unit["s3"] == pytest.approx(unit["final"])
    # a rung that slows things down shows as a negative saving, not hidden
    assert measured_waterfall({**by, "aero-s1": [{"tokens/trained": 70.0, "time/step_s": 5.0}]})["step_seconds"]["s1"] == -2.0
    assert measured_waterfall({k: v for k, v in by.items() if k != "aero-s1s2"}) is None
    assert missing_rungs(["grpo", "aero"]) == ["aero-s1", "aero-s1s2"]


def test_waterfalls_labels_sources():
    stats = [{"run_id": 1, "method": "grpo", "mean": {}, "savings_mean": {}},
             {"run_id": 2, "method": "aero", "mean": {"tokens/trained": 4.0}, "savings_mean": {"savings/s1_tokens": 1.0}}]
    out = waterfalls(stats, {7: {"grpo": [{"tokens/trained": 9.0}], "aero": [{"tokens/trained": 4.0}]}})
    (cf,) = out["counterfactual"]
    assert (cf["source"], cf["run_id"], cf["per_step"]["tokens"]["baseline"]) == ("counterfactual", 2, 5.0)
    assert "counterfactual" in cf["label"]
    (ms,) = out["measured"]
    assert ms["per_step"] is None and "missing aero-s1, aero-s1s2" in ms["label"]
    assert ms["runs_per_method"] == {"grpo": 1, "aero-s1": 0, "aero-s1s2": 0, "aero": 1}
