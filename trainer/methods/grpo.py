"""GRPO: n_total rollouts per prompt, every one trained, A = (r - mean) / (std + eps) per group."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

import common.metric_keys as mk
from trainer.methods.spec import MethodSpec, register
from trainer.methods.step import StepResult, strata_stats

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from trainer.methods.sampler import Sampler


def grpo_step(cfg: RunConfig, sampler: Sampler, rng: np.random.Generator | None = None) -> StepResult:
    """One batch of P prompts, n_total rollouts each, all trained; one group per prompt."""
    P = sampler.next_prompts()
    s = sampler.sample([cfg.n_total] * P, round_=0)
    stats = strata_stats(s.correct_by_prompt(P), cfg.n_total, cfg)
    stats[mk.ZERO_ACC_AFTER_RESCUE] = stats[mk.ZERO_ACC_AFTER_EXPLORE]
    return StepResult(rows=s.ids, group=s.prompt_of_row.copy(), prompts_used=P, calls=1, generated=len(s), stats=stats)


GRPO = register(MethodSpec(
    name="grpo", label="GRPO", colour="#4C78A8", family="grpo", order=0,
    description="GRPO (baseline)",
), grpo_step)
