import numpy as np
import pytest

from trainer.core.aero import CurationRules, curate
from trainer.core.savings import ladder_counts, savings_cost, waterfall
from trainer.core.strata import Stratum

R, L, H = int(Stratum.RESCUE), int(Stratum.LOW), int(Stratum.HIGH)

# p0 rescued (12 produced, c 1); p1 unrescued all-fail (28 produced); p2 low c=2;
# p3 high partial c=5; p4 all-correct. n_total 16, n_explore 8: B = 40, rescue used 4 + 20.
FACTS = dict(strata=[R, R, L, H, H], rescued=[True, False, False, False, False],
             produced=[12, 28, 8, 8, 8], correct=[1, 0, 2, 5, 8])


def test_ladder_counts_by_hand():
    c = ladder_counts(**FACTS, n_total=16, zero_variance_keep=4, k=1)
    assert c["grpo"].tolist() == [16] * 5
    assert c["s1"].tolist() == [2, 28, 8, 8, 8]
    assert c["s1s2"].tolist() == [2, 4, 8, 8, 4]
    assert c["aero"].tolist() == [2, 4, 4, 8, 4]


def test_waterfall_by_hand():
    w = waterfall(**FACTS, mean_tokens=[10, 20, 10, 10, 10], n_total=16)
    assert w.rollouts == {"grpo": 80, "s1": 54, "s1s2": 26, "aero": 22}
    assert w.saved_rollouts == {"s1": 26, "s2": 28, "s3": 4}
    assert w.tokens == {"grpo": 960, "s1": 820, "s1s2": 300, "aero": 260}
    assert w.saved_tokens == {"s1": 140, "s2": 520, "s3": 40}
    assert sum(w.saved_tokens.values()) == w.tokens["grpo"] - w.tokens["aero"]


def test_k2_changes_only_s3():
    w1 = waterfall(**FACTS, mean_tokens=[1] * 5, n_total=16, k=1)
    w2 = waterfall(**FACTS, mean_tokens=[1] * 5, n_total=16, k=2)
    assert w2.saved_rollouts == {"s1": 26, "s2": 28, "s3": 2} and w1.saved_rollouts["s3"] == 4


def test_aero_rung_matches_curation():
    rewards = [np.array([0] * 8 + [0, 0, 0, 1.0]), np.zeros(28), np.array([0, 1, 0, 0, 0, 1, 0, 0.0]),
               np.array([1, 1, 0, 1, 0, 1, 1, 0.0]), np.ones(8)]
    cur = curate(rewards, FACTS["strata"], [11, -1, -1, -1, -1], CurationRules(negative_selection="first"))
    assert ladder_counts(**FACTS, n_total=16)["aero"].tolist() == cur.n_kept.tolist()
    cur_s1 = curate(rewards, FACTS["strata"], [11, -1, -1, -1, -1], CurationRules(s2=False, s3=False))
    assert ladder_counts(**FACTS, n_total=16)["s1"].tolist() == cur_s1.n_kept.tolist()


def test_savings_cost():
    out = savings_cost({"s1": 140, "s2": 520, "s3": 40}, flops_per_token=6.0, seconds_per_token=0.001)
    assert out["flops"] == {"s1": 840.0, "s2": 3120.0, "s3": 240.0}
    assert out["seconds"]["s2"] == pytest.approx(0.52)
