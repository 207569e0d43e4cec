"""What a method step returns, engine-independently, and the pieces every step shares.

A step (trainer/methods/<name>.py) names the rows to train on by their global ids and gives
each its advantage; the engines (trainer/embedded/collect.py, trainer/verl/collect.py) pick
those rows from what they generated and train them with those advantages, nothing else.
Torch-using code is imported inside the functions: the registry imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

import common.metric_keys as mk
from trainer.core.strata import Stratum, stratify

if TYPE_CHECKING:
    from trainer.spec.config import RunConfig
    from trainer.methods.spec import MethodSpec

# Metrics that need the step's measured cost per trained token: (flops_per_token, seconds_per_token) -> metrics
CostMetrics = Callable[[float, float], dict[str, float]]

# Success-rate strata of the metrics every method logs (strata/*), for methods without their
# own S and tau (paper §4.2.1 defaults: rescue at c = 0, low below a success rate of 0.5).
STRATA_S, STRATA_TAU = 0, 0.5


@dataclass
class StepResult:
    """One step's training rows and its accounting.

    rows: int[M] global ids of the training rows, in training order; group: int[M] the group of
    each (the prompt group its advantage was normalised in); advantages: [M] the advantage of
    each row, what the engines train on; stats: the method's metrics; calls / generated: engine
    calls and rows of the step; cost_metrics: metrics the engine adds once it knows the step's
    cost per trained token (AERO's counterfactual savings), or None."""

    rows: np.ndarray
    group: np.ndarray
    advantages: np.ndarray
    prompts_used: int
    calls: int
    generated: int
    stats: dict[str, float] = field(default_factory=dict)
    cost_metrics: CostMetrics | None = None

    @classmethod
    def nothing_trained(cls, prompts_used: int, stats: dict[str, float] | None = None) -> StepResult:
        """A step that skipped every prompt it drew: no engine call, no row, nothing trained."""
        empty = np.zeros(0, dtype=np.int64)
        return cls(rows=empty, group=empty.copy(), advantages=np.zeros(0, dtype=np.float32), prompts_used=prompts_used,
                   calls=0, generated=0, stats=dict(stats or {}))


def correct_counts(correct: np.ndarray, rows_of: list[np.ndarray]) -> np.ndarray:
    """int[P]: correct rollouts among each prompt's rows (``correct`` indexed by global id)."""
    return np.array([correct[r].sum() for r in rows_of], dtype=np.int64)


def strata_stats(correct: np.ndarray, n, S: int = STRATA_S, tau: float = STRATA_TAU) -> dict[str, float]:
    """The strata/* and zero-accuracy metrics of a batch's correct counts (every method logs
    them; AERO with its own S and tau)."""
    strata = stratify(correct, n, S, tau)
    P = len(correct)
    return {mk.STRATA_RESCUE: float((strata == Stratum.RESCUE).sum()), mk.STRATA_LOW: float((strata == Stratum.LOW).sum()),
            mk.STRATA_HIGH: float((strata == Stratum.HIGH).sum()), "strata/all_fail": float((correct == 0).sum()),
            "strata/all_correct": float((correct == n).sum()), mk.ZERO_ACC_AFTER_EXPLORE: float((correct == 0).mean()),
            mk.ALL_CORRECT_RATIO: float((correct == n).sum() / P)}


def group_advantages(spec: MethodSpec, cfg: RunConfig, reward: np.ndarray, group: np.ndarray) -> np.ndarray:
    """[M] advantages of training rows with rewards ``reward`` (float[M]) in groups ``group``
    (int[M]), by the method's estimator (``spec.adv_estimator(cfg)``, trainer/core/estimators.py):
    A = r - mean_g(r), divided by the group std for GRPO, not for Dr.GRPO."""
    import torch

    if len(group) == 0:
        return torch.zeros(0).numpy()
    estimate = spec.adv_estimator(cfg).estimate
    return estimate(torch.tensor(np.asarray(reward).tolist()), torch.as_tensor(group), eps=1e-6,
                    unbiased=cfg.std_unbiased).numpy()
