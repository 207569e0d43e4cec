"""Knapsack RL (Li et al. 2025, "Knapsack RL: Unlocking Exploration of LLMs via Optimizing Budget
Allocation", arXiv 2509.25849): GRPO whose rollouts per prompt are chosen, under GRPO's total
budget, by a knapsack over each prompt's estimated success rate.

    1. draw the batch of P prompts; p_i = the prompt's success rate at its last visit (its
       history, kept in the sampler's state across steps and epochs)
    2. prompts never seen get n_total rollouts (the paper's first epoch is homogeneous);
       the seen ones share B = n_total * (seen prompts) by the knapsack
           max sum_i Value(N_i, p_i)  s.t.  sum_i N_i <= B,  n_low <= N_i <= n_high
           Value(N, p) = (1 - p^N - (1 - p)^N) * p (1 - p)^2                     (§3)
       always-solved and never-solved prompts (Value = 0) keep the floor n_low
    3. fallback (§4): the budget the knapsack left unspent goes to never-solved prompts, one
       rollout each in turn, up to n_high
    4. one engine call with those counts; GRPO advantages per prompt group; every row trained
    5. remember each prompt's success rate c_i / N_i and the step it was seen

Departures from the paper (docs/algorithms.md "Knapsack RL"): "history" is the last visit of the prompt
on our finite training set (``train_size``, so a prompt comes back once per epoch), not a
previous epoch's full pass; the budget is per step, never more than GRPO's n_total * P.
"""

from __future__ import annotations

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

STATE_KEY = "knapsack"


class KnapsackConfig(Strict):
    """Knapsack RL (arXiv 2509.25849): per-prompt rollouts from each prompt's last success rate,
    under GRPO's total budget n_total * batch_prompts. Needs stable prompt ids (train_size on the
    arithmetic task)."""

    n_low: int = Field(2, ge=1, le=4096, description="Floor N_low: rollouts of every seen prompt, the always-solved and "
                       "never-solved ones included (paper: 2, the least that can show a non-zero gradient).")
    n_high: int = Field(64, ge=1, le=4096, description="Ceiling N_high on one prompt's rollouts (the paper reaches 93 "
                        "with a budget of 8 per prompt); capped by the step's budget.")
    fallback: bool = Field(True, description="Give the budget the knapsack leaves unspent to never-solved prompts "
                           "(paper §4 fallback); off: it stays unspent.")


def knapsack_rules(cfg: RunConfig) -> Issues:
    k = cfg.knapsack
    if k.n_high < k.n_low:
        return [("knapsack.n_high", f"must be >= knapsack.n_low ({k.n_low})")]
    if k.n_low > cfg.n_total:
        return [("knapsack.n_low", f"must be <= n_total ({cfg.n_total}): the floors must fit GRPO's budget")]
    return []


KNAPSACK_SECTION = Section(
    name="knapsack", model=KnapsackConfig, title="Knapsack RL (budget allocation)", rules=knapsack_rules,
    form=(("train_size", "train_size (finite set; 0 = stream)"), ("knapsack.n_low", "N_low (floor)"),
          ("knapsack.n_high", "N_high (ceiling)"), ("knapsack.fallback", "fallback to unsolved prompts")),
)


def plan_counts(cfg: RunConfig, rates: list[float | None]) -> tuple[np.ndarray, dict[str, float]]:
    """Rollouts per prompt of one batch from each prompt's last success rate (None: unseen),
    steps 2-3 of the module docstring; and the plan's metrics."""
    from trainer.core.allocation import fallback, knapsack_allocate

    k, n = cfg.knapsack, cfg.n_total
    seen = np.array([r is not None for r in rates], dtype=bool)
    p = np.array([r if r is not None else np.nan for r in rates], dtype=float)
    counts = np.full(len(rates), n, dtype=np.int64)
    budget = n * int(seen.sum())
    if seen.any():
        counts[seen] = knapsack_allocate(p[seen], budget, k.n_low, k.n_high)
        spent = int(counts[seen].sum())
        if k.fallback:
            counts[seen] = fallback(counts[seen], p[seen] == 0.0, budget, k.n_high)
        stats = {"knapsack/fallback": float(counts[seen].sum() - spent), "knapsack/unspent": float(budget - counts[seen].sum())}
    else:
        stats = {"knapsack/fallback": 0.0, "knapsack/unspent": 0.0}
    stats.update({"knapsack/seen": float(seen.sum()), "knapsack/max_n": float(counts.max()) if len(counts) else 0.0,
                  "knapsack/min_n": float(counts.min()) if len(counts) else 0.0})
    return counts, stats


def knapsack_step(cfg: RunConfig, sampler: Sampler, rng: np.random.Generator | None = None, *, spec: MethodSpec) -> StepResult:
    """One Knapsack RL step (module docstring); the history lives in ``sampler.state``."""
    saved = sampler.state.get(STATE_KEY) or {"clock": 0, "rate": {}}
    clock, memory = saved["clock"] + 1, dict(saved["rate"])
    P = sampler.next_prompts()
    ids = sampler.prompt_keys()
    rates = [memory[i][0] / memory[i][1] if i is not None and i in memory else None for i in ids]
    counts, plan = plan_counts(cfg, rates)
    s = sampler.sample(counts.tolist(), round_=0)
    correct = s.correct_by_prompt(P)
    for i, key in enumerate(ids):
        if key is not None and counts[i] > 0:
            memory[key] = [int(correct[i]), int(counts[i]), clock]
    sampler.state[STATE_KEY] = {"clock": clock, "rate": memory}
    group = s.prompt_of_row.copy()
    stats = {**strata_stats(correct, counts), **plan}
    stats[mk.ZERO_ACC_AFTER_RESCUE] = stats[mk.ZERO_ACC_AFTER_EXPLORE]
    return StepResult(rows=s.ids, group=group, advantages=group_advantages(spec, cfg, s.reward, group), prompts_used=P,
                      calls=1, generated=len(s), stats=stats)


KNAPSACK = register(MethodSpec(
    name="knapsack", family="knapsack", sections=(KNAPSACK_SECTION,),
    # the history lives in the sampler's state (checkpointed by both engines), keyed by stable prompt ids
    needs=Needs(engines=BOTH_ENGINES, prompt_ids=True),
    display=Display("Knapsack RL", "#7F3C8D", "Knapsack RL (rollouts per prompt by a knapsack over its last success "
                    "rate; knapsack section)", order=50, dash=4),
), knapsack_step)
