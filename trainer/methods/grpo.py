"""GRPO: n_total rollouts per prompt, every one trained, A = (r - mean) / (std + eps) per group.

The baseline method (``MethodSpec.baseline``): savings, reach and Compare measure the others against it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

import common.metric_keys as mk
from trainer.methods.spec import BOTH_ENGINES, Display, MethodSpec, Needs, VerlMapping, register
from trainer.methods.step import StepResult, group_advantages, strata_stats

if TYPE_CHECKING:
    from trainer.spec.config import RunConfig
    from trainer.methods.sampler import Sampler


def grpo_step(cfg: RunConfig, sampler: Sampler, rng: np.random.Generator | None = None, *, spec: MethodSpec) -> StepResult:
    """One batch of P prompts, n_total rollouts each, all trained; one group per prompt."""
    P = sampler.next_prompts()
    s = sampler.sample([cfg.n_total] * P, round_=0)
    stats = strata_stats(s.correct_by_prompt(P), cfg.n_total)
    stats[mk.ZERO_ACC_AFTER_RESCUE] = stats[mk.ZERO_ACC_AFTER_EXPLORE]
    group = s.prompt_of_row.copy()
    return StepResult(rows=s.ids, group=group, advantages=group_advantages(spec, cfg, s.reward, group), prompts_used=P,
                      calls=1, generated=len(s), stats=stats)


# The baseline: every other method's savings and reach are measured against it.
GRPO = register(MethodSpec(
    name="grpo", family="grpo", baseline=True, display=Display("GRPO", "#4C78A8", "GRPO (baseline)", order=0),
    needs=Needs(engines=BOTH_ENGINES), verl=VerlMapping(stock_fit=True),  # exactly verl's GRPO: its own fit
), grpo_step)
