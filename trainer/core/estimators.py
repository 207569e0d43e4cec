"""Group advantage estimators, registered by key (as verl's ``register_adv_est``).

A method trains with one estimator: its spec fixes the key (``MethodSpec.estimator``, Dr.GRPO's
``"drgrpo"``) or takes the run config's ``adv_estimator``. Every step computes its groups'
advantages through :func:`get_adv_estimator`, so a new estimator is one decorated function
here and no step changes.

Stdlib only at import (torch is imported inside the functions): the config's submit-time rules
read :attr:`AdvEstimator.divides_by_std` without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from torch import Tensor

Estimate = Callable[..., "Tensor"]  # (rewards[N], group_ids[N], *, eps, unbiased) -> advantages[N]


@dataclass(frozen=True)
class AdvEstimator:
    """key: the config value; divides_by_std: whether advantages are scaled by the group's
    spread (also decides AERO's Bayesian baseline: (r - u~) / sqrt(u~(1 - u~)) or r - u~);
    estimate: the function; summary: one line for help texts."""

    key: str
    divides_by_std: bool
    estimate: Estimate
    summary: str


ADV_ESTIMATORS: dict[str, AdvEstimator] = {}


def register_adv_estimator(key: str, *, divides_by_std: bool) -> Callable[[Estimate], Estimate]:
    """Register the decorated function as estimator ``key`` (its docstring's first line is the
    summary). A key may be registered once."""

    def decorate(fn: Estimate) -> Estimate:
        if key in ADV_ESTIMATORS:
            raise ValueError(f"advantage estimator {key!r} is already registered")
        summary = (fn.__doc__ or key).strip().splitlines()[0]
        ADV_ESTIMATORS[key] = AdvEstimator(key, divides_by_std, fn, summary)
        return fn

    return decorate


def get_adv_estimator(key: str) -> AdvEstimator:
    try:
        return ADV_ESTIMATORS[key]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {key!r}; known: {', '.join(ADV_ESTIMATORS)}") from None


@register_adv_estimator("grpo", divides_by_std=True)
def grpo_outcome_advantage(rewards: Tensor, group_ids: Tensor, *, eps: float = 1e-6, unbiased: bool = True) -> Tensor:
    """GRPO: A_i = (r_i - mean_g(r)) / (std_g(r) + eps) (AERO paper §3.1, first equation)."""
    from trainer.core.advantages import grpo_advantage

    return grpo_advantage(rewards, group_ids, eps=eps, unbiased=unbiased, normalize_std=True)


@register_adv_estimator("drgrpo", divides_by_std=False)
def drgrpo_outcome_advantage(rewards: Tensor, group_ids: Tensor, *, eps: float = 1e-6, unbiased: bool = True) -> Tensor:
    """Dr.GRPO: A_i = r_i - mean_g(r), never divided by the group std (Liu et al. 2025, §3.1)."""
    from trainer.core.advantages import grpo_advantage

    return grpo_advantage(rewards, group_ids, eps=eps, unbiased=unbiased, normalize_std=False)
