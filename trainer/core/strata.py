"""Correctness and success-rate strata: what every method, engine and the evaluator share.

A rollout is *correct* iff its reward > 0.5 (verifiable rewards are binary {0, 1}). A prompt's
stratum (AERO's Stage I, arXiv 2602.14338 §4.1, §4.2.1) follows from its correct count among
its exploration rollouts; every method logs the strata (trainer/methods/step.py
``strata_stats``), AERO also routes prompts by them (trainer/core/aero.py).

numpy and the stdlib only, so the method registry, the samplers and the backend can import it
without loading torch (tests/trainer/core/test_strata.py checks it).
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class Stratum(IntEnum):
    """Stage I strata (§4.1, §4.2.1). Values are stored in int arrays."""

    RESCUE = 0  # c <= S (S = 0: zero-accuracy prompts)
    LOW = 1  # S / n_explore < u < tau: low-success partial
    HIGH = 2  # u >= tau: high-success, all-correct included


def is_correct(rewards) -> np.ndarray:
    """bool[N]: reward > 0.5 (binary verifiable reward; robust to float 1.0 vs 0.999...)."""
    return np.asarray(rewards, dtype=np.float64) > 0.5


def stratify(correct, n_explore: int | np.ndarray, S: int, tau: float) -> np.ndarray:
    """Stratify prompts by their exploration success (§4.1, §4.2.1; docs/algorithms.md §4 step 2).

        u = c / n_explore
        RESCUE  if c <= S                       (rescue set Q_res, u <= u_res = S / n_explore)
        LOW     if S / n_explore < u < tau      (low-success partial)
        HIGH    if u >= tau                     (high-success, all-correct included)

    RESCUE is tested first, so a prompt with c <= S is in the rescue set even if u >= tau
    (only possible when tau <= S / n_explore, which the paper's S <= n_explore/2, tau = 0.5
    excludes except at the single point c = S = n_explore/2).

    Args:
        correct: int[P] correct counts c among the n_explore exploration rollouts.
    Returns:
        int[P] of Stratum values.
    """
    c = np.asarray(correct, dtype=np.int64)
    if (c < 0).any() or (c > n_explore).any():
        raise ValueError(f"correct counts must be in [0, n_explore={n_explore}]")
    u = c / n_explore
    out = np.where(u >= tau, int(Stratum.HIGH), int(Stratum.LOW))
    return np.where(c <= S, int(Stratum.RESCUE), out).astype(np.int64)
