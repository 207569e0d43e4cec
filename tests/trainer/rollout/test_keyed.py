"""Per-row keyed sampling (trainer/rollout/keyed.py): the counter-based random numbers, the
inverse-CDF draw and its search over a rounded cumulative sum. That a row's tokens then depend on
its key only, on every decode path, is tests/trainer/rollout/test_decode_paths.py."""

import pytest
import torch

from trainer.rollout.base import SamplingParams
from trainer.rollout.keyed import keyed_uniform, pick, row_key, sample_keyed, splitmix64, splitmix64_ref


def test_splitmix64_wraps_as_uint64():
    """The int64 tensor version is bit-for-bit the unsigned reference (products wrap, shifts are logical)."""
    xs = [0, 1, 2, 12345, -1, -(2**63), 2**63 - 1, 0x123456789ABCDEF]
    got = splitmix64(torch.tensor(xs, dtype=torch.int64)).tolist()
    assert [g & (2**64 - 1) for g in got] == [splitmix64_ref(x & (2**64 - 1)) for x in xs]
    u = keyed_uniform(torch.tensor(xs, dtype=torch.int64), torch.arange(len(xs)))
    assert u.dtype == torch.float64 and bool(((u >= 0) & (u < 1)).all()) and len(set(u.tolist())) == len(xs)


def test_keyed_sampling_is_the_distribution_and_never_a_filtered_token():
    """Inverse-CDF on keyed uniforms: frequencies match the (top-p filtered) probabilities, a
    zero-probability token is never drawn, and log-probs are of the full softmax at T."""
    torch.manual_seed(0)
    logits = torch.randn(1, 6) * 2
    sp = SamplingParams(0.7, 0.8, 1)
    N = 20_000
    keys = torch.tensor([row_key(3, 0, i) for i in range(N)], dtype=torch.int64)
    tok, lp = sample_keyed(logits.expand(N, -1), sp, keys, torch.zeros(N, dtype=torch.long))
    z = logits[0] / 0.7
    p = torch.softmax(z, -1)
    order = p.argsort(descending=True)
    kept = order[:int(((p[order].cumsum(0) - p[order]) < 0.8).sum())]
    q = torch.zeros(6)
    q[kept] = p[kept] / p[kept].sum()
    freq = torch.bincount(tok, minlength=6).float() / N
    assert (freq[q == 0] == 0).all()
    assert freq.tolist() == pytest.approx(q.tolist(), abs=0.015)
    assert lp.tolist() == pytest.approx(torch.log_softmax(z, -1)[tok].tolist(), abs=1e-5)


def test_a_rounded_cumulative_sum_never_picks_a_filtered_token():
    """A tree-scanned cumulative sum (CUDA's) may rise or fall across filtered zeros; a search
    landing on a zero takes the last kept token before it, or the most likely one."""
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.0, 0.5], [0.0, 0.0, 0.0, 1.0, 0.0]])
    cdf = torch.tensor([[0.0, 0.5, 0.5000001, 0.5000002, 1.0], [1e-7, 1e-7, 2e-7, 1.0, 1.0]])
    x = torch.tensor([[0.50000005], [0.5e-7]])
    assert pick(probs, cdf, x).tolist() == [2, 0]  # the bare search lands on zeros (a CPU sum never looks so)
    assert pick(probs, cdf, x, sequential=False).tolist() == [1, 3]
    assert pick(probs, cdf, torch.tensor([[0.2], [0.9]]), sequential=False).tolist() == [1, 3]
    # the CPU's own sum: flat across zeros, the search lands on positive tokens only
    p = torch.softmax(torch.randn(64, 500), -1) * (torch.rand(64, 500) > 0.7)
    for _ in range(5):
        got = pick(p, p.cumsum(-1), torch.rand(64, 1) * p.sum(-1, keepdim=True) * 0.999999)
        assert bool((p.gather(-1, got[:, None]) > 0).all())
