"""Policy-gradient losses: token aggregation, PPO-clip surrogate, k3 KL, entropy.

Shapes: N sequences, T response positions, V vocabulary; ``mask`` [N, T] is 1 on response
tokens that count and 0 on padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def aggregate(values: Tensor, mask: Tensor, mode: str, max_len: int | None = None, n_seqs: float | None = None,
              n_tokens: float | None = None) -> Tensor:
    """Reduce per-token values [N, T] to a scalar.

    - 'token-mean' (DAPO §3.3): sum_{i,t} v m / sum_{i,t} m  (every token weighs the same).
    - 'seq-mean-token-mean' (GRPO, paper §3.1 J(theta) with 1/N sum_i 1/|o_i| sum_t):
      mean over the N sequences of each sequence's token mean.
    - 'seq-mean-token-sum-norm' (Dr.GRPO): 1/N sum_i (sum_t v m) / max_len, a constant
      normaliser so no length bias: the generation budget (``max_new_tokens``, as Dr.GRPO and
      verl's ``loss_scale_factor``). Required: the only width at hand, T = values.shape[-1], is
      the padded batch's (prompt tokens included), which changes from mini-batch to
      mini-batch and would bring back the length dependence the mode exists to remove.

    ``n_seqs`` replaces N in the sequence means: the update passes (rows of the step) /
    (mini-batches), the same for every mini-batch, as verl's ``global_batch_size`` (equal to N
    when the rows split evenly). ``n_tokens`` likewise replaces the token count of 'token-mean'.
    Given both, every mode is a plain sum over rows, so a mini-batch cut into micro-batches
    (gradient accumulation) gets exactly the loss and gradient of one pass over it: the update
    passes the mini-batch's rows and response tokens to every micro-batch. Empty denominators
    are clamped to 1 (an all-padding row contributes 0 but still counts in N for the sequence
    means).

    Returns:
        0-dim Tensor.
    """
    m = mask.to(values.dtype)
    N = values.shape[0] if n_seqs is None else n_seqs
    if mode == "token-mean":
        return (values * m).sum() / (m.sum().clamp(min=1) if n_tokens is None else max(n_tokens, 1.0))
    if mode == "seq-mean-token-mean":
        per_seq = (values * m).sum(-1) / m.sum(-1).clamp(min=1)
        return per_seq.sum() / N
    if mode == "seq-mean-token-sum-norm":
        if max_len is None:
            raise ValueError("seq-mean-token-sum-norm needs max_len, the generation budget (max_new_tokens)")
        return ((values * m).sum(-1) / max_len).sum() / N
    raise ValueError(f"loss aggregation must be one of {AGG_MODES}; got {mode!r}")


@dataclass(frozen=True)
class Aggregation:
    """How the update reduces per-token losses (:func:`aggregate`'s mode and constants).

    Refused at construction when a constant the mode needs is missing (``max_len`` for
    'seq-mean-token-sum-norm'), so a run fails before its first step, not inside it."""

    mode: str = "seq-mean-token-mean"
    max_len: int | None = None
    n_seqs: float | None = None
    n_tokens: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in AGG_MODES:
            raise ValueError(f"loss aggregation must be one of {AGG_MODES}; got {self.mode!r}")
        if self.mode == "seq-mean-token-sum-norm" and (self.max_len is None or self.max_len <= 0):
            raise ValueError("seq-mean-token-sum-norm needs max_len > 0, the generation budget (max_new_tokens)")

    def __call__(self, values: Tensor, mask: Tensor) -> Tensor:
        return aggregate(values, mask, self.mode, self.max_len, self.n_seqs, self.n_tokens)


def clipped_surrogate(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    eps_low: float = 0.2,
    eps_high: float | None = None,
    agg: str | Aggregation = "seq-mean-token-mean",
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO-clip policy loss (paper §3.1; DAPO clip-higher with eps_high > eps_low).

        rho_{i,t} = exp(logp_{i,t} - old_logp_{i,t})
        l_{i,t}   = -min(rho A_i, clip(rho, 1 - eps_low, 1 + eps_high) A_i)
        loss      = aggregate(l, mask, agg)

    With ``weights`` [N, T] (off-policy rows, trainer/core/importance.py), ``old_logp`` is the
    proximal policy's and each token's term is scaled by its importance weight w_{i,t}
    (decoupled PPO: l_{i,t} <- w_{i,t} l_{i,t}).

    Stats (detached, token-mean over the mask): ``clip_frac`` = fraction of tokens where the
    clipped term is the active (strictly smaller) one, so their gradient is zero;
    ``approx_kl`` = mean(old_logp - logp), the k1 estimate of KL(pi_old || pi).

    Args:
        logp, old_logp: [N, T] log-probs of the sampled tokens under the current / behaviour policy.
        advantages: [N] sequence-level advantages (broadcast over tokens).
        eps_high: defaults to eps_low (symmetric clip).
        agg: a mode of :func:`aggregate`, or an :class:`Aggregation` with its constants.
    Returns:
        (0-dim loss, {"clip_frac": 0-dim, "approx_kl": 0-dim}).
    """
    eps_high = eps_low if eps_high is None else eps_high
    A = advantages.to(logp.dtype).unsqueeze(-1)
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    unclipped = -A * ratio
    clipped = -A * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_token = torch.maximum(unclipped, clipped)
    if weights is not None:
        per_token = weights * per_token
    loss = (agg if isinstance(agg, Aggregation) else Aggregation(agg))(per_token, mask)
    with torch.no_grad():
        m = mask.to(logp.dtype)
        denom = m.sum().clamp(min=1)
        clip_frac = ((clipped > unclipped).to(logp.dtype) * m).sum() / denom
        approx_kl = (-log_ratio * m).sum() / denom
    return loss, {"clip_frac": clip_frac, "approx_kl": approx_kl}


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(pi || pi_ref) (Schulman 2020; GRPO's KL term).

        k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1   >= 0, = 0 iff equal

    Unbiased for KL(pi || pi_ref) when tokens are sampled from pi. Returns [N, T].
    """
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Per-position entropy H = logsumexp(z) - sum_v softmax(z)_v z_v, stable for large logits.

    Computed on z - max(z) (H is shift-invariant), in float32 for half-precision inputs.

    Args: logits [N, T, V]. Returns [N, T].
    """
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    # shift by the max so lse and sum p z are O(log V), no cancellation of two large numbers
    logits = logits - logits.amax(dim=-1, keepdim=True).detach()
    lse = torch.logsumexp(logits, dim=-1)
    p = torch.softmax(logits, dim=-1)
    # p = 0 where a logit is -inf (masked vocabulary); define 0 * -inf = 0 there.
    plogit = torch.where(p > 0, p * logits, torch.zeros_like(p))
    return lse - plogit.sum(-1)
