"""Pure algorithm core: advantages, AERO allocation and curation, DAPO, losses, pass@k, savings.

Imports only torch, numpy and the stdlib. See docs/algorithms.md for the spec.
"""

from trainer.core.advantages import bayesian_advantage, grpo_advantage, posterior_mean
from trainer.core.aero import (
    KINDS,
    SPLITS,
    Curated,
    RescueState,
    Stratum,
    aero_advantages,
    apply_round,
    curate,
    is_correct,
    negatives_to_keep,
    next_round,
    plan_rescue_round,
    plan_rounds,
    replay,
    start_rescue,
    stratify,
    theorem41_factor,
)
from trainer.core.dapo import nonzero_variance_mask, overlong_penalty
from trainer.core.losses import AGG_MODES, aggregate, clipped_surrogate, entropy_from_logits, kl_k3
from trainer.core.passk import avg_at_k, bootstrap_ci, pass_at_k
from trainer.core.savings import RUNGS, STRATEGIES, Waterfall, ladder_counts, savings_cost, waterfall

__all__ = [
    "AGG_MODES", "KINDS", "RUNGS", "SPLITS", "STRATEGIES",
    "Curated", "RescueState", "Stratum", "Waterfall",
    "aero_advantages", "aggregate", "apply_round", "avg_at_k", "bayesian_advantage", "bootstrap_ci",
    "clipped_surrogate", "curate", "entropy_from_logits", "grpo_advantage", "is_correct", "kl_k3",
    "ladder_counts", "negatives_to_keep", "next_round", "nonzero_variance_mask", "overlong_penalty",
    "pass_at_k", "plan_rescue_round", "plan_rounds", "posterior_mean", "replay", "savings_cost",
    "start_rescue", "stratify", "theorem41_factor", "waterfall",
]
