"""The AERO advantage estimator for verl, registered by name ("aero").

verl's ``compute_advantage`` (ray_trainer.py) looks estimators up in
``core_algos.ADV_ESTIMATOR_REGISTRY`` *in the process that runs the trainer*, i.e. the Ray
task-runner actor; a registration made in the launcher process never reaches it. So the
task runner calls :func:`register` first thing (trainer/verl/runner.py), and the function is
importable by name so every process can register the same object.

The Bayesian baseline (S2, paper §4.2.2) travels as the batch's ``reward_baselines`` column,
which ``compute_advantage`` passes to non-GAE/GRPO estimators: u~ for rows of a 'bayes'
group, NaN for every other row. The math is the shared core's (trainer.core.aero), not a
second implementation:

    rows with finite baseline:  A_i = (r_i - u~_g) / sqrt(u~_g (1 - u~_g))
    other rows:                 A_i = (r_i - mean_g) / (std_g + eps)      (groups = uid)

then broadcast over the response tokens (times ``response_mask``). Padded rows (masked,
``response_mask`` all 0) get a unique uid, so they are singleton groups with A = 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from trainer.core.aero import aero_advantages

NAME = "aero"


def aero_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                           reward_baselines: torch.Tensor | None = None, epsilon: float = 1e-6,
                           norm_adv_by_std_in_grpo: bool = True, config: Any = None,
                           **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage-estimator signature -> (advantages [B, T], returns [B, T]).

    Args:
        token_level_rewards: [B, T] (the outcome reward sits on one token; summed per row).
        response_mask: [B, T].
        index: [B] object array of uids (one per prompt group).
        reward_baselines: [B] float, u~ on rows of Bayesian groups, NaN elsewhere (or None).
        config: verl's AlgoConfig; ``norm_adv_by_std_in_grpo`` is read from it when present.
    """
    if config is not None and hasattr(config, "get"):
        norm_adv_by_std_in_grpo = bool(config.get("norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo))
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1).float()
        _, gid = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
        gid_t = torch.as_tensor(gid, dtype=torch.long)
        G = int(gid.max()) + 1 if len(gid) else 0
        u_tilde = np.full(G, np.nan)
        if reward_baselines is not None:
            base = reward_baselines.detach().float().cpu().numpy().reshape(-1)
            finite = np.isfinite(base)
            u_tilde[gid[finite]] = base[finite]
        kinds = ["bayes" if np.isfinite(u) else "grpo" for u in u_tilde]
        adv = aero_advantages(scores, gid_t, kinds, u_tilde, eps=epsilon, unbiased=True,
                              normalize_std=norm_adv_by_std_in_grpo)
        adv = adv.to(response_mask.device).unsqueeze(-1) * response_mask.to(adv.dtype)
    return adv, adv


def register() -> None:
    """Register :func:`aero_outcome_advantage` as "aero" in verl's registry (idempotent)."""
    from verl.trainer.ppo import core_algos

    if core_algos.ADV_ESTIMATOR_REGISTRY.get(NAME) is not aero_outcome_advantage:
        core_algos.ADV_ESTIMATOR_REGISTRY.pop(NAME, None)  # a stale copy from a re-imported module
        core_algos.register_adv_est(NAME)(aero_outcome_advantage)
