"""What a method step returns, engine-independently, and the pieces every step shares.

A step (trainer/methods/<family>.py) names the rows to train on by their global ids and
gives what their advantages need; the adapters pick those rows from what they generated.
The embedded adapter computes the advantages here (:func:`advantages`); verl computes them
with its registered estimator from the same inputs (``reward_baselines`` = u~ per row).
Torch-using code is imported inside the functions: the registry imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

import common.metric_keys as mk

if TYPE_CHECKING:
    from trainer.config import RunConfig


@dataclass
class StepResult:
    """One step's curated training rows and its accounting.

    rows: int[M] global ids of the training rows, in training order; group: int[M] the group of
    each (advantages are normalised within a group); kinds / u_tilde: AERO's per-group kind and
    posterior mean (indexed by group id; None for other methods); shaped: float32[M] DAPO's
    overlong-shaped rewards of the training rows (None otherwise; verl's DAPO reward manager
    shapes its rewards itself); stats: the method's metrics; ledger: AERO's per-prompt facts for
    the counterfactual savings; calls / generated: engine calls and rows of the step."""

    rows: np.ndarray
    group: np.ndarray
    prompts_used: int
    calls: int
    generated: int
    stats: dict[str, float] = field(default_factory=dict)
    kinds: list[str] | None = None
    u_tilde: np.ndarray | None = None
    shaped: np.ndarray | None = None
    ledger: dict | None = None

    def u_tilde_of_rows(self) -> np.ndarray:
        """float[M]: u~ of each training row's group (NaN outside Bayesian groups)."""
        if self.u_tilde is None:
            return np.full(len(self.rows), np.nan)
        return np.asarray(self.u_tilde, dtype=np.float64)[self.group]


def correct_counts(correct: np.ndarray, rows_of: list[np.ndarray]) -> np.ndarray:
    """int[P]: correct rollouts among each prompt's rows (``correct`` indexed by global id)."""
    return np.array([correct[r].sum() for r in rows_of], dtype=np.int64)


def strata_stats(correct: np.ndarray, n: int, cfg: RunConfig) -> dict[str, float]:
    """The strata/* and zero-accuracy metrics of a batch's correct counts (every method logs them)."""
    from trainer.core.aero import Stratum, stratify

    strata = stratify(correct, n, cfg.aero.S, cfg.aero.tau)
    P = len(correct)
    return {mk.STRATA_RESCUE: float((strata == Stratum.RESCUE).sum()), mk.STRATA_LOW: float((strata == Stratum.LOW).sum()),
            mk.STRATA_HIGH: float((strata == Stratum.HIGH).sum()), "strata/all_fail": float((correct == 0).sum()),
            "strata/all_correct": float((correct == n).sum()), mk.ZERO_ACC_AFTER_EXPLORE: float((correct == 0).mean()),
            mk.ALL_CORRECT_RATIO: float((correct == n).sum() / P)}


def advantages(cfg: RunConfig, result: StepResult, reward: np.ndarray):
    """Tensor[M] advantages of the training rows: AERO's (Bayesian baseline on 'bayes' groups,
    group-normalised elsewhere) when the step gave kinds, else group-normalised over the shaped
    (DAPO) or plain rewards. ``reward`` is indexed by global row id. The group std divides
    unless the method or ``adv_estimator`` says not (Dr.GRPO)."""
    import torch

    from trainer.core.advantages import grpo_advantage
    from trainer.core.aero import aero_advantages
    from trainer.methods.spec import get_method

    if len(result.rows) == 0:
        return torch.zeros(0)
    r = torch.as_tensor(result.shaped) if result.shaped is not None else \
        torch.tensor(np.asarray(reward)[result.rows].tolist())
    gid = torch.as_tensor(result.group)
    std = get_method(cfg.method).divides_by_std(cfg)
    if result.kinds is not None:
        return aero_advantages(r, gid, result.kinds, result.u_tilde, eps=1e-6, unbiased=cfg.std_unbiased,
                               normalize_std=std)
    return grpo_advantage(r, gid, eps=1e-6, unbiased=cfg.std_unbiased, normalize_std=std)


def savings_metrics(cfg: RunConfig, ledger: dict, flops_per_token: float, seconds_per_token: float) -> dict[str, float]:
    """Counterfactual S1/S2/S3 savings against GRPO at the same budget (trainer.core.savings),
    in trained rollouts, tokens, FLOPs and seconds (seconds from this step's measured cost per
    trained token)."""
    from trainer.core.savings import savings_cost, waterfall

    w = waterfall(**ledger, n_total=cfg.n_total, zero_variance_keep=cfg.aero.zero_variance_keep, k=cfg.aero.k)
    cost = savings_cost(w.saved_tokens, flops_per_token, seconds_per_token)
    out = {mk.SAVINGS_GRPO_ROLLOUTS: w.rollouts["grpo"], mk.SAVINGS_GRPO_TOKENS: w.tokens["grpo"]}
    for s in ("s1", "s2", "s3"):
        out.update({f"savings/{s}_rollouts": w.saved_rollouts[s], f"savings/{s}_tokens": w.saved_tokens[s],
                    f"savings/{s}_flops": cost["flops"][s], f"savings/{s}_s": cost["seconds"][s]})
    return out
