"""DAPO pieces (Yu et al. 2025, arXiv 2503.14476): dynamic-sampling filter, soft overlong punishment.

Clip-higher is ``losses.clipped_surrogate(eps_low, eps_high)``; token-level aggregation is
``losses.aggregate(mode='token-mean')``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def nonzero_variance_mask(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Dynamic-sampling filter: keep rollouts whose group rewards are not all equal.

        keep_i = ( max_{j in g(i)} r_j  !=  min_{j in g(i)} r_j )

    DAPO's constraint 0 < |{o_i : is_equivalent(a, o_i)}| < G, written on rewards so it also
    holds for shaped (non-binary) rewards. Size-1 groups have zero variance and are dropped.

    Args:
        rewards: Tensor[N]; group_ids: LongTensor[N] (any integers).
    Returns:
        BoolTensor[N].
    """
    r = rewards if torch.is_floating_point(rewards) else rewards.to(torch.float32)
    if r.numel() == 0:
        return torch.zeros(0, dtype=torch.bool, device=r.device)
    _, inv = torch.unique(group_ids, return_inverse=True)
    g = int(inv.max()) + 1
    gmin = torch.full((g,), float("inf"), dtype=r.dtype, device=r.device).scatter_reduce(0, inv, r, "amin")
    gmax = torch.full((g,), float("-inf"), dtype=r.dtype, device=r.device).scatter_reduce(0, inv, r, "amax")
    return (gmax != gmin)[inv]


def overlong_penalty(lengths: Tensor, max_len: int, buffer: int, penalty: float = 1.0) -> Tensor:
    """DAPO soft overlong punishment (DAPO §3.4, eq. 13), added to the task reward.

        R_len(y) = 0                                        if |y| <= L_max - L_cache
                 = ((L_max - L_cache) - |y|) / L_cache * p   if L_max - L_cache < |y| <= L_max
                 = -p                                       if |y| > L_max

    with L_max = ``max_len``, L_cache = ``buffer``, p = ``penalty``; ``buffer = 0`` switches the
    ramp off (only |y| > L_max is punished).

    Length cap: generation stops at max_new_tokens, so with max_len = max_new_tokens the last
    branch is unreachable and a response that hits the cap gets the full -p from the ramp at
    |y| = L_max. Whether a truncated response (no EOS) is counted as |y| = L_max or as
    overlong (e.g. pass max_len + 1 for it) is the caller's choice; the embedded loop passes the
    generated length including EOS.

    Args:
        lengths: Tensor[N] response lengths in tokens.
    Returns:
        float Tensor[N] of values in [-penalty, 0].
    """
    L = lengths.to(torch.float32) if not torch.is_floating_point(lengths) else lengths
    start = float(max_len - buffer)
    over = torch.full_like(L, -float(penalty))
    if buffer > 0:
        ramp = (start - L) / float(buffer) * float(penalty)
        out = torch.where(L <= start, torch.zeros_like(L), ramp)
    else:
        out = torch.zeros_like(L)
    return torch.where(L > float(max_len), over, out)
