"""Counterfactual compute-savings waterfall of AERO's strategies against GRPO (paper §4.4, §5.3 Fig. 8;
spec: docs/algorithms.md §6).

For one step's prompts, count the rollouts (and tokens) each rung of the ladder would train,
all at GRPO's budget of n_total rollouts per prompt:

    grpo  every prompt trains n_total rollouts.
    s1    (+S1 early termination) a rescued prompt trains 2 (its group of 2); an unrescued
          rescue-set prompt keeps everything it produced (explore + rescue); every other prompt
          trains the n_explore rollouts it was explored with.
    s1s2  (+S2) additionally, every group still zero-variance after S1 (unrescued all-fail,
          all-correct) keeps min(zero_variance_keep, produced).
    aero  (+S3) additionally, every low-success partial group (stratum LOW, or an unrescued
          rescue-set prompt with 0 < c, possible when S > 0) keeps c + m,
          m = min(floor(k c), produced - c). High-success partial groups keep all n_explore.

Savings per strategy are differences of adjacent rungs: s1 = grpo - s1, s2 = s1 - s1s2,
s3 = s1s2 - aero. A prompt's tokens are its rollout count times its mean (prompt + response)
tokens per rollout, so counterfactual rollouts that were never generated are estimated by the
mean of those that were. Under S1 an unrescued prompt can train more than n_total rollouts
(up to n_max), but the batch total never exceeds GRPO's (the rescue budget is
(n_total - n_explore) P), so s1 savings in rollouts are >= 0; in tokens they are too unless
prompt lengths differ a lot.
FLOPs and seconds are linear in tokens: see :func:`savings_cost`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainer.core.aero import negatives_to_keep
from trainer.core.strata import Stratum

RUNGS = ("grpo", "s1", "s1s2", "aero")
STRATEGIES = ("s1", "s2", "s3")


@dataclass(frozen=True)
class Waterfall:
    """Per-step ladder. ``rollouts``/``tokens``: rung -> trained amount; ``saved_*``: strategy -> saving."""

    rollouts: dict[str, float]
    tokens: dict[str, float]
    saved_rollouts: dict[str, float]
    saved_tokens: dict[str, float]


def ladder_counts(strata, rescued, produced, correct, *, n_total: int, zero_variance_keep: int = 4, k: float = 1.0) -> dict[str, np.ndarray]:
    """Per-prompt trained-rollout counts for each rung (see module docstring).

    Args:
        strata: int[P] Stratum values from exploration.
        rescued: bool[P] whether S1 rescued the prompt.
        produced: int[P] rollouts the prompt produced this step (n_explore unless in the rescue set).
        correct: int[P] correct rollouts among them.
    Returns:
        {rung: int[P]}.
    """
    strata = np.asarray(strata, dtype=np.int64)
    rescued = np.asarray(rescued, dtype=bool)
    n = np.asarray(produced, dtype=np.int64)
    c = np.asarray(correct, dtype=np.int64)
    s1 = np.where(rescued, 2, n)
    zero_var = ~rescued & ((c == 0) | (c == n))
    s1s2 = np.where(zero_var, np.minimum(zero_variance_keep, n), s1)
    low = ~rescued & ~zero_var & (strata != int(Stratum.HIGH))
    m = np.array([negatives_to_keep(int(ci), int(ni - ci), k) for ci, ni in zip(c, n)], dtype=np.int64)
    aero = np.where(low, c + m, s1s2)
    return {"grpo": np.full(len(n), n_total, dtype=np.int64), "s1": s1, "s1s2": s1s2, "aero": aero}


def waterfall(
    strata, rescued, produced, correct, mean_tokens, *, n_total: int, zero_variance_keep: int = 4, k: float = 1.0
) -> Waterfall:
    """Trained rollouts and tokens per rung, and the savings of S1, S2, S3, for one step.

    Args:
        mean_tokens: float[P] mean (prompt + response) tokens per rollout of each prompt.
        other args: see :func:`ladder_counts`.
    """
    counts = ladder_counts(strata, rescued, produced, correct, n_total=n_total, zero_variance_keep=zero_variance_keep, k=k)
    w = np.asarray(mean_tokens, dtype=np.float64)
    rollouts = {r: float(v.sum()) for r, v in counts.items()}
    tokens = {r: float((v * w).sum()) for r, v in counts.items()}

    def diffs(d: dict[str, float]) -> dict[str, float]:
        return {s: d[a] - d[b] for s, a, b in zip(STRATEGIES, RUNGS[:-1], RUNGS[1:])}

    return Waterfall(rollouts=rollouts, tokens=tokens, saved_rollouts=diffs(rollouts), saved_tokens=diffs(tokens))


def savings_cost(saved_tokens: dict[str, float], flops_per_token: float, seconds_per_token: float) -> dict[str, dict[str, float]]:
    """Convert token savings to FLOPs and seconds: x * flops_per_token, x * seconds_per_token.

    The caller supplies training FLOPs per token (e.g. 6N + 2N per extra forward, docs/metrics.md
    "FLOPs") and measured training seconds per token of the step.
    """
    return {
        "flops": {s: v * flops_per_token for s, v in saved_tokens.items()},
        "seconds": {s: v * seconds_per_token for s, v in saved_tokens.items()},
    }
