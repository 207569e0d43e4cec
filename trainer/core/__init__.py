"""Pure algorithm core: correctness and strata, advantages, AERO's rescue rounds and curation, DAPO,
losses, pass@k, savings, and the statistics of comparisons across seeds.

Imports only torch, numpy, scipy and the stdlib. See docs/algorithms.md for the spec.
Names are re-exported lazily (PEP 562) so that the numpy-only modules (``passk``, ``stats``, ``strata``)
can be imported by the backend without loading torch.
"""

from __future__ import annotations

import importlib

_EXPORTS: dict[str, tuple[str, ...]] = {
    "advantages": ("bayesian_advantage", "grpo_advantage", "posterior_mean"),
    "aero": ("KINDS", "Curated", "aero_advantages", "curate", "negatives_to_keep", "theorem41_factor"),
    "dapo": ("nonzero_variance_mask", "overlong_penalty"),
    "losses": ("AGG_MODES", "aggregate", "clipped_surrogate", "entropy_from_logits", "kl_k3"),
    "passk": ("avg_at_k", "bootstrap_ci", "pass_at_k"),
    "savings": ("RUNGS", "STRATEGIES", "Waterfall", "ladder_counts", "savings_cost", "waterfall"),
    "reach": ("ReachCurve", "reach", "reach_across_seeds"),
    "rescue": ("SPLITS", "RescueState", "plan_rescue_round", "plan_rounds", "replay", "start_rescue"),
    "stats": ("mean_ci", "paired_permutation_test", "paired_diff_ci", "interpolated_band", "paired_ratios"),
    "strata": ("Stratum", "is_correct", "stratify"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'trainer.core' has no attribute {name!r}")
    return getattr(importlib.import_module(f"trainer.core.{_WHERE[name]}"), name)
