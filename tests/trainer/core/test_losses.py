import math

import pytest
import torch

from trainer.core.losses import Aggregation, aggregate, clipped_surrogate, entropy_from_logits, kl_k3

V = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
M = torch.tensor([[1, 1, 1], [1, 0, 0]])


def test_aggregate_modes_by_hand():
    assert aggregate(V, M, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate(V, M, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate(V, M, "seq-mean-token-sum-norm", max_len=3).item() == pytest.approx((6 / 3 + 4 / 3) / 2)
    assert aggregate(V, M, "seq-mean-token-sum-norm", max_len=5).item() == pytest.approx(1.0)
    with pytest.raises(ValueError):
        aggregate(V, M, "nope")


def test_dr_grpo_normaliser_is_the_budget_not_the_padded_width():
    """Dr.GRPO's constant is max_len whatever the batch's width: padding the same rows wider
    (a longer prompt or response elsewhere in the mini-batch) leaves the loss unchanged. Without
    max_len the only width at hand is the padded one, so the mode refuses to guess."""
    agg = Aggregation("seq-mean-token-sum-norm", max_len=12)
    wider_v = torch.cat([V, torch.full((2, 7), 5.0)], 1)  # 7 more columns of padding (masked)
    wider_m = torch.cat([M, torch.zeros((2, 7), dtype=M.dtype)], 1)
    assert agg(V, M).item() == agg(wider_v, wider_m).item() == pytest.approx((6 / 12 + 4 / 12) / 2)
    assert Aggregation("seq-mean-token-sum-norm", max_len=12, n_seqs=4)(V, M).item() == pytest.approx((6 + 4) / 12 / 4)
    with pytest.raises(ValueError, match="max_len"):
        aggregate(V, M, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="max_len"):
        Aggregation("seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="one of"):
        Aggregation("nope")


def _hand_case(eps_low=0.2, eps_high=0.28):
    # five one-token sequences: (A, rho)
    A = torch.tensor([1.0, 1.0, -1.0, -1.0, 1.0])
    rho = torch.tensor([1.5, 0.5, 1.5, 0.5, 1.25])
    old = torch.zeros(5, 1)
    logp = torch.log(rho).unsqueeze(-1).requires_grad_(True)
    loss, stats = clipped_surrogate(logp, old, A, torch.ones(5, 1), eps_low, eps_high, "token-mean")
    loss.backward()
    return loss, stats, logp.grad.squeeze(-1), rho


def test_clipped_surrogate_values_grad_and_clip_frac():
    loss, stats, grad, rho = _hand_case()
    # per-token losses: A>0,rho 1.5 -> -1.28 (clipped); A>0,rho .5 -> -.5; A<0,rho 1.5 -> 1.5;
    # A<0,rho .5 -> .8 (clipped); A>0,rho 1.25 -> -1.25 (inside [0.8, 1.28])
    assert loss.item() == pytest.approx((-1.28 - 0.5 + 1.5 + 0.8 - 1.25) / 5)
    assert stats["clip_frac"].item() == pytest.approx(2 / 5)
    # d(-A rho)/d logp = -A rho where unclipped, 0 where clipped; token-mean divides by 5
    assert torch.allclose(grad, torch.tensor([0.0, -0.5, 1.5, 0.0, -1.25]) / 5)
    assert stats["approx_kl"].item() == pytest.approx(-float(torch.log(rho).mean()), rel=1e-5)


def test_symmetric_clip_clips_the_clip_higher_token():
    _, stats, grad, _ = _hand_case(0.2, 0.2)
    assert stats["clip_frac"].item() == pytest.approx(3 / 5) and grad[4].item() == 0.0


def test_surrogate_respects_mask_and_seq_mean():
    logp = torch.zeros(2, 3, requires_grad=True)
    A = torch.tensor([1.0, -2.0])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss, _ = clipped_surrogate(logp, torch.zeros(2, 3), A, mask, 0.2, 0.2, "seq-mean-token-mean")
    loss.backward()
    assert loss.item() == pytest.approx((-1 + 2) / 2)
    assert torch.allclose(logp.grad, torch.tensor([[-0.25, -0.25, 0.0], [1.0, 0.0, 0.0]]))


def test_kl_k3():
    lp = torch.tensor([[-1.0, -2.0]])
    assert (kl_k3(lp, lp) == 0).all()
    ref = torch.tensor([[-1.5, -0.5]])
    k = kl_k3(lp, ref)
    assert (k > 0).all()
    d = -0.5
    assert k[0, 0].item() == pytest.approx(math.exp(d) - d - 1)


def test_entropy():
    for Vsz in (2, 7, 50):
        h = entropy_from_logits(torch.zeros(2, 3, Vsz))
        assert torch.allclose(h, torch.full((2, 3), math.log(Vsz)))
    big = torch.full((1, 1, 4), 1e4)
    assert entropy_from_logits(big).item() == pytest.approx(math.log(4), abs=1e-4)
    onehot = torch.tensor([[[0.0, -float("inf"), -float("inf")]]])
    assert entropy_from_logits(onehot).item() == 0.0
    p = torch.tensor([0.5, 0.25, 0.25])
    h = entropy_from_logits(torch.log(p).view(1, 1, 3) + 3.0)
    assert h.item() == pytest.approx(1.5 * math.log(2), rel=1e-6)
