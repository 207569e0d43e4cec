"""Off-policy correction of the policy loss: rows sampled by an older policy (asynchronous
training, trainer/spec/offpolicy.py) weighted back to the policy the update starts from.

Three policies meet in one update (decoupled PPO; Hilton, Cobbe, Schulman 2022, "Batch
size-invariance for policy optimization", §3; AReaL, Fu et al. 2025, arXiv 2505.24298, §5.2):
the behaviour policy ``mu`` that sampled the row (k versions old), the proximal policy
``pi_old`` the update starts from (the current weights before this step's first optimizer step)
and the policy ``pi_theta`` being trained. Shapes: [N, T] per-token log-probs, as in
trainer/core/losses.py.
"""

from __future__ import annotations

import torch
from torch import Tensor

CORRECTIONS = ("none", "tis", "mis")


def importance_weights(proximal_logp: Tensor, behaviour_logp: Tensor, cap: float, mode: str) -> tuple[Tensor, Tensor]:
    """Per-token importance weights from the behaviour to the proximal policy, capped.

        w_{i,t} = pi_old(y_t | x, y_<t) / mu(y_t | x, y_<t) = exp(proximal_logp - behaviour_logp)
        tis:  w <- min(w, C)            truncated IS (IMPALA's rho-bar, Espeholt et al. 2018, eq. 1;
                                        TIS, Yao et al. 2025, "Your efficient RL framework secretly
                                        brings you off-policy RL training")
        mis:  w <- w * 1[w <= C]        masked IS: a token past the cap is dropped, not shrunk
                                        (verl's rollout_is 'mask' mode; NeMo-RL's IS truncation)
        none: w <- 1

    The weights carry no gradient: both policies are fixed during the update. Returns
    (weights, capped), ``capped`` true where w exceeded C (what tis truncated or mis masked)."""
    if mode not in CORRECTIONS:
        raise ValueError(f"correction must be one of {CORRECTIONS}; got {mode!r}")
    with torch.no_grad():
        w = torch.exp(proximal_logp.float() - behaviour_logp.float())
        capped = w > cap
        if mode == "tis":
            w = torch.clamp(w, max=cap)
        elif mode == "mis":
            w = torch.where(capped, torch.zeros_like(w), w)
        else:
            w = torch.ones_like(w)
    return w.to(proximal_logp.dtype), capped


def weight_stats(proximal_logp: Tensor, behaviour_logp: Tensor, mask: Tensor, cap: float) -> dict[str, float]:
    """Token means over ``mask`` of the raw importance weight pi_old / mu and of the share of
    tokens whose weight exceeds the cap (``is_weight_mean``, ``is_capped_frac``)."""
    m = mask.float()
    n = m.sum().clamp(min=1)
    w = torch.exp(proximal_logp.float() - behaviour_logp.float())
    return {"is_weight_mean": float((w * m).sum() / n), "is_capped_frac": float(((w > cap).float() * m).sum() / n)}
