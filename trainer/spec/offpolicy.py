"""Asynchronous training: how far the sampler may run ahead of the trainer, and how the loss
corrects for it (the ``offpolicy`` block of a run config, its submit-time rules).

With ``max_staleness = k > 0`` the embedded engine samples step ``j`` with the policy after step
``j - 1 - k`` while the trainer trains the steps before (trainer/embedded/pipeline.py), so
sampling and training overlap; ``k = 0`` is the synchronous loop, unchanged. The anchors' names
for ``k``: AReaL ``rollout.max_head_offpolicyness``, NeMo-RL ``max_trajectory_age_steps``,
prime-rl ``max_async_level``, TRL ``max_staleness``, Tinker ``sampling_steps_ahead``; verl's
``one_step_off_policy`` is ``k = 1``. The correction's equations: docs/algorithms.md
("Off-policy correction"). pydantic and the stdlib only: the API validates configs with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from trainer.spec.config_types import Strict
from trainer.methods.spec import get_method
from trainer.spec.sampler_registry import get_sampler

if TYPE_CHECKING:
    from trainer.spec.config import RunConfig


class OffPolicyConfig(Strict):
    """How stale a trained rollout may be, and the importance-sampling correction (module docstring)."""

    max_staleness: int = Field(
        0, ge=0, le=8, description="Policy versions (training steps) the sampler may run ahead of the trainer: step j "
        "is sampled by the policy after step j-1-k while earlier steps train, so generation and the update overlap. "
        "0 = synchronous (sample, score, update, repeat). AReaL: max_head_offpolicyness; NeMo-RL: "
        "max_trajectory_age_steps; prime-rl: max_async_level; TRL: max_staleness; verl: one_step_off_policy is 1. "
        "The embedded engine with rollout.sampler=hf only.")
    correction: Literal["none", "tis", "mis"] = Field(
        "tis", description="How the loss corrects for rows sampled by an older policy (docs/algorithms.md). none: "
        "the PPO ratio against the policy that sampled the row (plain PPO on stale rows). tis: decoupled PPO, the "
        "ratio against the policy about to be updated (one extra forward per stale step), each token weighted by "
        "its importance weight old/behaviour truncated at is_cap. mis: the same, tokens whose weight exceeds is_cap "
        "masked out.")
    is_cap: float = Field(2.0, gt=1.0, le=1000.0, description="The importance weight's cap C for tis and mis "
                          "(verl: rollout_is_threshold; NeMo-RL: the truncation of its IS correction).")


def offpolicy_issues(cfg: RunConfig) -> list[tuple[str, str]]:
    """What asynchronous training asks of a run: the embedded engine's hf sampler (its own copy
    of the policy, refreshed per step) and a method that declares it can run off-policy."""
    if cfg.offpolicy.max_staleness == 0:
        return []
    issues = []
    if not get_sampler(cfg.rollout.sampler).runs_ahead:
        issues.append(("offpolicy.max_staleness", "the sampler runs ahead on its own copy of the policy, which the "
                       "hf sampler keeps (vLLM holds one copy that every update overwrites): set rollout.sampler=hf, or "
                       "offpolicy.max_staleness=0"))
    if not get_method(cfg.method).needs.off_policy:
        issues.append(("method", f"method {cfg.method} cannot train rows sampled by an older policy (it says so in "
                       f"its spec): set offpolicy.max_staleness=0 to train {cfg.method}"))
    return issues
