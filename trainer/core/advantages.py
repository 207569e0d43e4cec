"""Advantage estimators: GRPO / Dr.GRPO group baselines and AERO's Bayesian baseline.

Pure tensor functions; no model, no I/O. Shapes: N = rollouts in the (flat) batch.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _as_float(x: Tensor) -> Tensor:
    return x if torch.is_floating_point(x) else x.to(torch.float32)


def grpo_advantage(
    rewards: Tensor,
    group_ids: Tensor,
    eps: float = 1e-6,
    unbiased: bool = True,
    normalize_std: bool = True,
) -> Tensor:
    """GRPO group-normalised advantage (paper §3.1, first equation).

        A_i = (r_i - mean_g(r)) / (std_g(r) + eps)        (normalize_std=True, GRPO)
        A_i =  r_i - mean_g(r)                            (normalize_std=False, Dr.GRPO)

    where g is the group of rollout i. Groups may have different sizes and group ids may be
    any integers (they need not be contiguous or sorted). The computation is vectorised with
    ``index_add_`` over the groups, no Python loop.

    Departures / edge cases (documented choices):
    - ``eps`` is added to the std (as verl), not inside the square root.
    - ``unbiased=True`` uses Bessel's correction (divide by n_g - 1), as ``torch.std``/verl;
      ``False`` divides by n_g.
    - A group of size 1 gets A = 0 (no baseline information; unbiased std undefined).
    - A zero-variance group (all rewards equal) gets exactly A = 0, even when floating-point
      rounding would leave r - mean at 1e-17 (we mask on min == max of the group).

    Args:
        rewards: Tensor[N] scalar reward per rollout.
        group_ids: LongTensor[N] group (prompt) id per rollout.
    Returns:
        Tensor[N] advantages, same float dtype as ``rewards`` (float32 if integer).
    """
    r = _as_float(rewards)
    if r.ndim != 1 or group_ids.shape != r.shape:
        raise ValueError(f"rewards and group_ids must be 1-D of equal length; got {tuple(r.shape)}, {tuple(group_ids.shape)}")
    if r.numel() == 0:
        return r.clone()
    _, inv = torch.unique(group_ids, return_inverse=True)
    g = int(inv.max()) + 1
    count = torch.zeros(g, dtype=r.dtype, device=r.device).index_add_(0, inv, torch.ones_like(r))
    total = torch.zeros(g, dtype=r.dtype, device=r.device).index_add_(0, inv, r)
    mean = total / count
    centred = r - mean[inv]
    sq = torch.zeros(g, dtype=r.dtype, device=r.device).index_add_(0, inv, centred * centred)
    denom = (count - 1).clamp(min=1) if unbiased else count
    std = (sq / denom).sqrt()
    adv = centred / (std[inv] + eps) if normalize_std else centred
    gmin = torch.full((g,), float("inf"), dtype=r.dtype, device=r.device).scatter_reduce(0, inv, r, "amin")
    gmax = torch.full((g,), float("-inf"), dtype=r.dtype, device=r.device).scatter_reduce(0, inv, r, "amax")
    flat = (gmin == gmax)[inv]  # zero variance, which includes size-1 groups
    return torch.where(flat, torch.zeros_like(adv), adv)


def posterior_mean(c, n, alpha0: float = 1.0, beta0: float = 1.0):
    """Beta-Binomial posterior mean of the success rate (paper §4.2.2, Appendix 'Bayesian Posterior Updates').

        u ~ Beta(alpha0, beta0),  c | u ~ Binomial(n, u)
        u~ = E[u | c, n] = (c + alpha0) / (n + alpha0 + beta0)

    Works elementwise on Python numbers, numpy arrays or tensors. With the paper's uniform prior
    (1, 1): 0/8 -> 0.1, 8/8 -> 0.9, so u~ is strictly inside (0, 1) and the Bayesian advantage
    below is finite and non-zero.
    """
    return (c + alpha0) / (n + alpha0 + beta0)


def bayesian_advantage(rewards: Tensor, u_tilde) -> Tensor:
    """AERO S2 advantage with the posterior mean as baseline (paper §4.2.2; docs/algorithms.md §1).

        A_i = (r_i - u~) / sqrt(u~ (1 - u~))

    i.e. the Bernoulli standardisation with the posterior mean in place of the empirical one.
    For an all-correct group A_i > 0, for an all-fail group A_i < 0 (8/8 with Beta(1,1):
    u~ = 0.9, A = 0.1 / 0.3 = +1/3). It is never re-normalised within the group: group
    normalisation of a constant-reward group would give zero again.

    Args:
        rewards: Tensor[N].
        u_tilde: float or Tensor broadcastable to [N], each value in (0, 1).
    Returns:
        Tensor[N].
    """
    r = _as_float(rewards)
    u = torch.as_tensor(u_tilde, dtype=r.dtype, device=r.device)
    if bool(((u <= 0) | (u >= 1)).any()):
        raise ValueError("u_tilde must lie strictly in (0, 1); a Beta prior with alpha0, beta0 > 0 guarantees it")
    return (r - u) / torch.sqrt(u * (1 - u))
