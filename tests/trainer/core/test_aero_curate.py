import math

import numpy as np
import pytest
import torch

from trainer.core.aero import CurationRules, aero_advantages, curate, theorem41_factor
from trainer.core.strata import Stratum

R, L, H = int(Stratum.RESCUE), int(Stratum.LOW), int(Stratum.HIGH)
F = np.float64


def _batch():
    """Five prompts, n_explore 8.
    0 rescued: 8 fails, rescue rounds [0,0],[0,1] -> rescued_at 11
    1 unrescued all-fail: 8 + 20 rescue rollouts, all 0
    2 low: c = 2 at explore positions 1 and 5
    3 high partial: c = 5
    4 all-correct: 8/8
    """
    rewards = [
        np.array([0] * 8 + [0, 0, 0, 1], F),
        np.zeros(28),
        np.array([0, 1, 0, 0, 0, 1, 0, 0], F),
        np.array([1, 1, 0, 1, 0, 1, 1, 0], F),
        np.ones(8),
    ]
    strata = [R, R, L, H, H]
    rescued_at = [11, -1, -1, -1, -1]
    return rewards, strata, rescued_at


def _cur(**kw):
    rewards, strata, rescued_at = _batch()
    rules = CurationRules(**{"n_explore": 8, "negative_selection": "first", **kw})
    return curate(rewards, strata, rescued_at, rules, rng=np.random.default_rng(0))


def test_full_aero_curation_by_hand():
    c = _cur()
    assert c.kinds == ["rescued", "bayes", "low", "high", "bayes"]
    assert c.kept[0].tolist() == [0, 11]  # first incorrect + first correct rescue rollout: group of 2
    assert c.kept[1].tolist() == [0, 1, 2, 3]
    assert c.u_tilde[1] == pytest.approx(1 / 30)  # (0 + 1) / (28 + 2): counted over all produced
    assert c.kept[2].tolist() == [0, 1, 2, 5]  # c = 2 correct + m = 2 first incorrect
    assert c.kept[3].tolist() == list(range(8))
    assert c.kept[4].tolist() == [0, 1, 2, 3] and c.u_tilde[4] == pytest.approx(0.9)
    assert np.isnan(c.u_tilde[[0, 2, 3]]).all()
    assert c.n_kept.tolist() == [2, 4, 4, 8, 4]
    assert c.correct.tolist() == [1, 0, 2, 5, 8] and c.produced.tolist() == [12, 28, 8, 8, 8]


def test_low_success_m_for_k1_k2():
    rew = [np.array([1, 0, 0, 0, 0, 0, 1, 0], F), np.array([1, 1, 0, 1, 0, 0, 0, 0], F)]
    c1 = curate(rew, [L, L], [-1, -1], CurationRules(k=1, negative_selection="first"))
    assert c1.kept[0].tolist() == [0, 1, 2, 6] and c1.kept[1].tolist() == [0, 1, 2, 3, 4, 5]
    c2 = curate(rew, [L, L], [-1, -1], CurationRules(k=2, negative_selection="first"))
    assert c2.kept[0].tolist() == [0, 1, 2, 3, 4, 6]  # m = 4
    assert c2.kept[1].tolist() == list(range(8))  # m = min(6, 5) = 5: all incorrect
    c15 = curate([rew[1]], [L], [-1], CurationRules(k=1.5, negative_selection="first"))
    assert len(c15.kept[0]) == 3 + 4  # floor(4.5) = 4


def test_negative_selection_rules():
    r = np.array([1, 0, 0, 1, 0, 0, 0, 0], F)
    lengths = [np.array([5, 3, 9, 4, 9, 1, 7, 2])]
    longest = curate([r], [L], [-1], CurationRules(negative_selection="longest"), lengths_by_prompt=lengths)
    assert longest.kept[0].tolist() == [0, 2, 3, 4]  # lengths 9, 9 (tie -> generation order)
    shortest = curate([r], [L], [-1], CurationRules(negative_selection="shortest"), lengths_by_prompt=lengths)
    assert shortest.kept[0].tolist() == [0, 3, 5, 7]  # lengths 1, 2
    a = curate([r] * 3, [L] * 3, [-1] * 3, CurationRules(negative_selection="random"), rng=np.random.default_rng(7))
    b = curate([r] * 3, [L] * 3, [-1] * 3, CurationRules(negative_selection="random"), rng=np.random.default_rng(7))
    assert [x.tolist() for x in a.kept] == [x.tolist() for x in b.kept]
    for kept in a.kept:
        assert {0, 3} <= set(kept.tolist()) and len(kept) == 4 and (r[kept] == 0).sum() == 2
    with pytest.raises(ValueError):
        curate([r], [L], [-1], CurationRules(negative_selection="longest"))
    with pytest.raises(ValueError):
        curate([r], [L], [-1], CurationRules(negative_selection="random"), rng=None)


def test_random_rescue_negative_and_zero_variance_selection():
    rewards, strata, rescued_at = _batch()
    rules = CurationRules(rescue_negative="random", zero_variance_selection="random", negative_selection="first")
    c = curate(rewards, strata, rescued_at, rules, rng=np.random.default_rng(3))
    neg, pos = c.kept[0].tolist()
    assert pos == 11 and neg < 11 and rewards[0][neg] == 0
    assert len(c.kept[1]) == 4 and len(set(c.kept[1].tolist())) == 4 and c.kept[1].max() < 28


def test_ablation_s1_only():
    c = _cur(s2=False, s3=False)
    assert c.kinds == ["rescued", "zero", "low", "high", "zero"]
    assert c.n_kept.tolist() == [2, 28, 8, 8, 8]  # zero-variance groups keep everything they produced
    assert np.isnan(c.u_tilde).all()


def test_ablation_s1_s2():
    c = _cur(s3=False)
    assert c.kinds == ["rescued", "bayes", "low", "high", "bayes"]
    assert c.n_kept.tolist() == [2, 4, 8, 8, 4]


def test_s1_off_requires_no_rescue():
    rewards, strata, rescued_at = _batch()
    with pytest.raises(ValueError):
        curate(rewards, strata, rescued_at, CurationRules(s1=False))
    c = curate([np.zeros(8), np.array([0, 1] * 4, F)], [R, H], [-1, -1], CurationRules(s1=False))
    assert c.kinds == ["bayes", "high"] and c.u_tilde[0] == pytest.approx(0.1)


def test_S_positive_rescue_set_prompts():
    # S = 2: prompt 0 has c = 1 in explore, is never rescued after 4 rescue rollouts -> low partial
    #        prompt 1 has c = 2 in explore, rescued at index 9 -> group of 2, explore positives dropped
    rew = [np.array([0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0], F), np.array([1, 1, 0, 0, 0, 0, 0, 0, 0, 1], F)]
    c = curate(rew, [R, R], [-1, 9], CurationRules(negative_selection="first"))
    assert c.kinds == ["low", "rescued"]
    assert c.kept[0].tolist() == [0, 2] and c.kept[1].tolist() == [2, 9]
    with pytest.raises(ValueError):
        curate(rew, [R, R], [-1, 5])  # not a rescue rollout


def test_flat_indices_and_group_ids():
    c = _cur()
    prompt, idx, gid = c.flat()
    assert len(prompt) == 22 and (prompt == gid).all()
    assert prompt[:6].tolist() == [0, 0, 1, 1, 1, 1] and idx[:6].tolist() == [0, 11, 0, 1, 2, 3]


def test_aero_advantages_signs_and_values():
    rewards, strata, rescued_at = _batch()
    c = _cur()
    prompt, idx, gid = c.flat()
    r = torch.tensor([rewards[p][i] for p, i in zip(prompt, idx)], dtype=torch.float32)
    a = aero_advantages(r, torch.as_tensor(gid), c.kinds, c.u_tilde, eps=0.0)
    by = {p: a[torch.as_tensor(prompt == p)] for p in range(5)}
    s = math.sqrt(0.5)
    assert torch.allclose(by[0], torch.tensor([-s, s]), atol=1e-6)  # rescued group of 2, GRPO
    u = 1 / 30
    assert torch.allclose(by[1], torch.full((4,), -u / math.sqrt(u * (1 - u))), atol=1e-6)
    assert (by[1] < 0).all()  # all-fail: negative, not zero
    assert torch.allclose(by[4], torch.full((4,), 1 / 3), atol=1e-6)  # all-correct: positive
    g = 0.5 / math.sqrt(1 / 3)  # [0,1,0,1]: mean 1/2, unbiased std sqrt(1/3)
    assert torch.allclose(by[2], torch.tensor([-g, g, -g, g]), atol=1e-6)
    assert abs(float(by[3].sum())) < 1e-5 and (by[3] != 0).all()


def test_aero_advantages_zero_kind_and_drgrpo():
    r = torch.tensor([0.0, 0.0, 1.0, 1.0])
    g = torch.tensor([0, 0, 1, 1])
    a = aero_advantages(r, g, ["zero", "bayes"], [np.nan, 0.9])
    assert a[:2].tolist() == [0.0, 0.0] and torch.allclose(a[2:], torch.full((2,), 1 / 3))
    a = aero_advantages(r, g, ["zero", "bayes"], [np.nan, 0.9], normalize_std=False)
    assert torch.allclose(a[2:], torch.full((2,), 0.1))


def test_theorem41_factor_maximised_at_m_equals_c():
    m = np.arange(0, 61)
    for c in (1, 2, 3, 5, 8, 13):
        f = theorem41_factor(c, m)
        assert int(np.argmax(f)) == c and f[c] == pytest.approx(0.25)
        assert (f[m != c] < 0.25).all()
    assert theorem41_factor(0, 0) == 0.0 and theorem41_factor(2, 6) == pytest.approx(12 / 64)


def test_curation_rules_from_config_section():
    from trainer.methods.aero import AEROConfig
    from trainer.methods.aero_strategies import ALL, AeroStrategies

    sec = AEROConfig(n_explore=6, k=2.0, alpha0=0.5, beta0=2.0, zero_variance_keep=3, negative_selection="longest",
                     rescue_negative="random", zero_variance_selection="random")
    rules = CurationRules.from_config(sec, AeroStrategies(True, True, False))
    assert rules == CurationRules(s1=True, s2=True, s3=False, n_explore=6, alpha0=0.5, beta0=2.0, k=2.0,
                                  zero_variance_keep=3, negative_selection="longest", rescue_negative="random",
                                  zero_variance_selection="random")
    assert CurationRules.from_config(sec, ALL, n_explore=4).n_explore == 4  # aero-mem's smaller first call
    assert CurationRules.from_config(AEROConfig(), ALL) == CurationRules()  # defaults: the paper's
    rewards, strata, rescued_at = _batch()
    with pytest.raises(TypeError):
        curate(rewards, strata, rescued_at, k=2)  # settings travel in CurationRules only
