import math

import pytest
import torch

from trainer.core.advantages import bayesian_advantage, grpo_advantage, posterior_mean

# Three groups with non-contiguous, interleaved ids:
#   id 5: [1, 0, 0, 0]  mean 1/4, sum sq dev 3/4 -> unbiased std 1/2, biased std sqrt(3)/4
#   id 2: [1, 0]        mean 1/2, sum sq dev 1/2 -> unbiased std sqrt(1/2), biased 1/2
#   id 9: [1, 1, 0]     mean 2/3, sum sq dev 2/3 -> unbiased std sqrt(1/3), biased sqrt(2)/3
R = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
G = torch.tensor([5, 2, 5, 9, 2, 5, 9, 9, 5])


def test_grpo_unbiased_by_hand():
    a = grpo_advantage(R, G, eps=0.0, unbiased=True)
    s3 = math.sqrt(1 / 3)
    want = [1.5, math.sqrt(0.5), -0.5, (1 / 3) / s3, -math.sqrt(0.5), -0.5, (1 / 3) / s3, (-2 / 3) / s3, -0.5]
    assert torch.allclose(a, torch.tensor(want), atol=1e-6)


def test_grpo_biased_by_hand():
    a = grpo_advantage(R, G, eps=0.0, unbiased=False)
    r3 = math.sqrt(3)
    want = [r3, 1.0, -1 / r3, math.sqrt(0.5), -1.0, -1 / r3, math.sqrt(0.5), -math.sqrt(2), -1 / r3]
    assert torch.allclose(a, torch.tensor(want), atol=1e-6)


def test_grpo_eps_goes_in_denominator():
    a = grpo_advantage(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), eps=0.5, unbiased=False)
    assert torch.allclose(a, torch.tensor([0.5 / 1.0, -0.5 / 1.0]))


def test_drgrpo_is_reward_minus_mean():
    a = grpo_advantage(R, G, normalize_std=False)
    want = [0.75, 0.5, -0.25, 1 / 3, -0.5, -0.25, 1 / 3, -2 / 3, -0.25]
    assert torch.allclose(a, torch.tensor(want), atol=1e-6)


def test_zero_variance_and_size_one_groups_are_exactly_zero():
    r = torch.tensor([0.1, 0.1, 0.1, 0.7, 1.0, 1.0, 0.0, 1.0], dtype=torch.float32)
    g = torch.tensor([0, 0, 0, 1, 2, 2, 3, 3])
    a = grpo_advantage(r, g)
    assert (a[:6] == 0).all()  # exact, not approximately
    assert a[6] < 0 < a[7]


def test_integer_rewards_and_empty():
    a = grpo_advantage(torch.tensor([1, 0]), torch.tensor([3, 3]), eps=0.0)
    assert a.dtype == torch.float32 and torch.allclose(a, torch.tensor([math.sqrt(0.5), -math.sqrt(0.5)]))
    assert grpo_advantage(torch.zeros(0), torch.zeros(0, dtype=torch.long)).numel() == 0


def test_grpo_group_mean_zero_and_matches_loop():
    g = torch.randint(0, 6, (200,), generator=torch.Generator().manual_seed(0))
    r = torch.rand(200, generator=torch.Generator().manual_seed(1))
    a = grpo_advantage(r, g, eps=1e-6)
    for gid in g.unique():
        sel = g == gid
        x = r[sel]
        want = torch.zeros_like(x) if len(x) < 2 else (x - x.mean()) / (x.std(unbiased=True) + 1e-6)
        assert torch.allclose(a[sel], want, atol=1e-5)


def test_posterior_mean_by_hand():
    assert posterior_mean(8, 8, 1.0, 1.0) == pytest.approx(0.9)
    assert posterior_mean(0, 8, 1.0, 1.0) == pytest.approx(0.1)
    assert posterior_mean(0, 28, 1.0, 1.0) == pytest.approx(1 / 30)
    assert posterior_mean(3, 10, 2.0, 4.0) == pytest.approx(5 / 16)


def test_bayesian_advantage_by_hand():
    a = bayesian_advantage(torch.ones(4), 0.9)  # all-correct 8/8
    assert torch.allclose(a, torch.full((4,), 1 / 3))
    u = posterior_mean(0, 20, 1.0, 1.0)  # all-fail over 20 rollouts: 1/22
    a = bayesian_advantage(torch.zeros(4), u)
    assert (a < 0).all() and torch.allclose(a, torch.full((4,), -math.sqrt(1 / 21)))


def test_bayesian_advantage_rejects_degenerate_baseline():
    with pytest.raises(ValueError):
        bayesian_advantage(torch.ones(2), 1.0)
