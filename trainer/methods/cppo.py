"""CPPO (Lin et al. 2025, "CPPO: Accelerating the Training of Group Relative Policy
Optimization-Based Reasoning Models", arXiv 2503.22342): GRPO that trains only the completions
with the largest absolute advantage.

    1. generate  n_total rollouts per prompt (GRPO's budget, one engine call)
    2. advantage A_i = (r_i - mean_g r) / (std_g r + eps) over the whole group (§3, eq. 3)
    3. prune     keep the k = floor(n_total * (1 - prune_rate)) rows of each group with the
                 largest |A_i| (§4.1, "completion pruning"; ties in generation order)
    4. train     the kept rows, with the advantages of step 2

The pruned rows cost their rollouts but no training forward or backward, which is the paper's
saving (its Table 1: G = 16, P = 0.875, k = 2 kept accuracy on GSM8K at 4.9x less time). Its
second part, dynamic completion allocation (refilling the freed batch with more questions), is
not built: the step trains fewer rows instead, so it stays at GRPO's rollout budget.

This file and tests/trainer/methods/test_cppo.py are the whole method: the ``cppo`` config
section, its rule, its Launch-form inputs and its step; both engines run it through the generic
precomputed-advantages path.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

import common.metric_keys as mk
from trainer.spec.config_types import Field, Issues, Strict
from trainer.methods.section import Section
from trainer.methods.spec import BOTH_ENGINES, Display, MethodSpec, Needs, register
from trainer.methods.step import StepResult, group_advantages, strata_stats

if TYPE_CHECKING:
    from trainer.spec.config import RunConfig
    from trainer.methods.sampler import Sampler


class CPPOConfig(Strict):
    """CPPO completion pruning (arXiv 2503.22342 §4.1)."""

    prune_rate: float = Field(0.5, ge=0.0, lt=1.0, description="Pruning rate P: each group trains its "
                              "floor(n_total * (1 - P)) rollouts with the largest |advantage| (paper: 0.5 to 0.9375 "
                              "with G = 16; 0 = GRPO).")


def kept_per_group(cfg: RunConfig) -> int:
    """k = floor(n_total * (1 - P)), the rows each group trains (paper §4.1)."""
    return math.floor(cfg.n_total * (1.0 - cfg.cppo.prune_rate) + 1e-9)


def cppo_rules(cfg: RunConfig) -> Issues:
    if kept_per_group(cfg) < 1:
        return [("cppo.prune_rate", f"keeps no rollout of a group of n_total = {cfg.n_total}: must be at most "
                 f"{1 - 1 / cfg.n_total:g}")]
    return []


CPPO_SECTION = Section(name="cppo", model=CPPOConfig, title="CPPO (completion pruning)", rules=cppo_rules,
                       form=(("cppo.prune_rate", "pruning rate P"),))


def prune_by_abs_advantage(adv: np.ndarray, group: np.ndarray, k: int) -> np.ndarray:
    """bool[N]: the k rows of each group with the largest |adv| (ties: the earlier row first)."""
    keep = np.zeros(len(adv), dtype=bool)
    for g in np.unique(group):
        rows = np.flatnonzero(group == g)
        order = np.argsort(-np.abs(adv[rows]), kind="stable")
        keep[rows[order[:k]]] = True
    return keep


def cppo_step(cfg: RunConfig, sampler: Sampler, rng: np.random.Generator | None = None, *, spec: MethodSpec) -> StepResult:
    """One batch of P prompts, n_total rollouts each; advantages over each whole group, then the
    k rows of largest |A| per group are trained (module docstring)."""
    P = sampler.next_prompts()
    s = sampler.sample([cfg.n_total] * P, round_=0)
    group = s.prompt_of_row.copy()
    adv = group_advantages(spec, cfg, s.reward, group)
    keep = prune_by_abs_advantage(adv, group, kept_per_group(cfg))
    stats = strata_stats(s.correct_by_prompt(P), cfg.n_total)
    stats[mk.ZERO_ACC_AFTER_RESCUE] = stats[mk.ZERO_ACC_AFTER_EXPLORE]
    stats["cppo/pruned"] = float((~keep).sum())
    stats["cppo/kept_abs_adv"] = float(np.abs(adv[keep]).mean()) if keep.any() else 0.0
    return StepResult(rows=s.ids[keep], group=group[keep], advantages=adv[keep], prompts_used=P, calls=1,
                      generated=len(s), stats=stats)


CPPO = register(MethodSpec(
    name="cppo", family="cppo", sections=(CPPO_SECTION,), needs=Needs(engines=BOTH_ENGINES),
    display=Display("CPPO", "#8C6D31", "CPPO (GRPO training only the completions of largest |advantage|; cppo section)",
                    order=40, dash=3),
), cppo_step)
