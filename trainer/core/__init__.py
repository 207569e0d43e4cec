"""Pure algorithm core: correctness and strata, advantages, AERO's rescue rounds and curation, DAPO,
losses, pass@k, savings, the FLOPs formula (flops.py), and the statistics of comparisons across seeds.

Imports only torch, numpy, scipy, the stdlib and common's stdlib-only contracts (flops.py labels
its results with common/metric_keys.py's keys). See docs/algorithms.md for the spec.
Names are re-exported lazily (PEP 562) so that the numpy-only modules (``passk``, ``stats``, ``strata``)
can be imported by the backend without loading torch.
"""

from __future__ import annotations

from common.lazy import lazy_exports

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
__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
