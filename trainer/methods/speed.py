"""SPEED-RL (Zhang et al. 2025, "SPEED-RL: Faster Training of Reasoning Models via Online
Curriculum Learning", arXiv 2506.09016): screen every prompt with a few rollouts, drop the ones
with pass rate 0 or 1, spend the rest of the budget on the others.

    1. screen   n_screen rollouts of each of the P prompts (one engine call)
    2. qualify  keep prompt i iff 0 < c_i < n_screen  (§4; a pass rate near 0 or 1 has a
                gradient SNR near 0, §3 Thm. 3.1: SNR <= 4 N p (1 - p))
    3. continue the rest of GRPO's budget, (n_total - n_screen) * P, spread evenly over the
                kept prompts (at most ``max_per_prompt`` each; one more engine call)
    4. train    every rollout of each kept prompt (screening + continuation), GRPO advantages
                over that whole group; the dropped prompts' screening rollouts are not trained

Departures from the paper (docs/algorithms.md "SPEED-RL"): the paper keeps drawing prompts until its
training batch is full (its pre-fetching two-phase sampler); here a step screens one batch of P
prompts and gives the saved budget to the kept prompts of that batch, so every step costs at
most GRPO's n_total * P rollouts. A step whose prompts all fail the screen trains nothing.
No history: it runs on both engines (the verl curated loop).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

import common.metric_keys as mk
from trainer.spec.config_types import Field, Issues, Strict
from trainer.methods.section import Section
from trainer.methods.spec import BOTH_ENGINES, Display, MethodSpec, Needs, VerlMapping, register
from trainer.methods.step import StepResult, group_advantages, strata_stats

if TYPE_CHECKING:
    from trainer.spec.config import RunConfig
    from trainer.methods.sampler import Sampler


class SPEEDConfig(Strict):
    """SPEED-RL screening (arXiv 2506.09016 §4) at GRPO's budget n_total * batch_prompts."""

    n_screen: int = Field(4, ge=2, le=4096, description="Screening rollouts per prompt N_init (paper: 4); a prompt with "
                          "0 or n_screen correct is dropped. Must be < n_total.")
    max_per_prompt: int = Field(64, ge=2, le=4096, description="Cap on one kept prompt's rollouts, screening included "
                                "(the saved budget above it stays unspent).")


def speed_rules(cfg: RunConfig) -> Issues:
    s = cfg.speed
    if s.n_screen >= cfg.n_total:
        return [("speed.n_screen", f"must be < n_total ({cfg.n_total}): the continuation needs budget")]
    if s.max_per_prompt < s.n_screen:
        return [("speed.max_per_prompt", f"must be >= speed.n_screen ({s.n_screen})")]
    return []


SPEED_SECTION = Section(
    name="speed", model=SPEEDConfig, title="SPEED-RL (screening)", rules=speed_rules,
    form=(("speed.n_screen", "screening rollouts N_init"), ("speed.max_per_prompt", "cap per kept prompt")),
)


def speed_step(cfg: RunConfig, sampler: Sampler, rng: np.random.Generator | None = None, *, spec: MethodSpec) -> StepResult:
    """One SPEED-RL step (module docstring)."""
    from trainer.core.allocation import qualifies, spread

    sp, n = cfg.speed, cfg.n_total
    P = sampler.next_prompts()
    screen = sampler.sample([sp.n_screen] * P, round_=0)
    c0 = screen.correct_by_prompt(P)
    kept = np.flatnonzero(qualifies(c0, sp.n_screen))
    more = np.zeros(P, dtype=np.int64)
    more[kept] = spread((n - sp.n_screen) * P, len(kept), sp.max_per_prompt - sp.n_screen)
    rows_of = screen.rows_by_prompt(P)
    reward, calls, generated = dict(zip(screen.ids.tolist(), screen.reward.tolist())), 1, len(screen)
    correct = c0.copy()
    if more.any():
        cont = sampler.sample(more.tolist(), round_=1)
        calls, generated = 2, generated + len(cont)
        reward.update(zip(cont.ids.tolist(), cont.reward.tolist()))
        correct += cont.correct_by_prompt(P)
        rows_of = [np.concatenate([a, b]) for a, b in zip(rows_of, cont.rows_by_prompt(P))]
    rows = np.concatenate([rows_of[i] for i in kept]) if len(kept) else np.zeros(0, dtype=np.int64)
    group = np.concatenate([np.full(len(rows_of[i]), i, dtype=np.int64) for i in kept]) if len(kept) else rows.copy()
    r = np.array([reward[i] for i in rows.tolist()], dtype=np.float64)
    stats = strata_stats(c0, sp.n_screen)
    stats[mk.ZERO_ACC_AFTER_RESCUE] = float((correct == 0).mean())
    stats.update({"speed/kept": float(len(kept)), "speed/dropped_all_fail": float((c0 == 0).sum()),
                  "speed/dropped_all_correct": float((c0 == sp.n_screen).sum()),
                  "speed/unspent": float(n * P - generated)})
    return StepResult(rows=rows, group=group, advantages=group_advantages(spec, cfg, r, group), prompts_used=P,
                      calls=calls, generated=generated, stats=stats)


def _screen_n(cfg: RunConfig) -> int:
    return cfg.speed.n_screen


SPEED = register(MethodSpec(
    name="speed", family="speed", sections=(SPEED_SECTION,),
    needs=Needs(engines=BOTH_ENGINES), verl=VerlMapping(first_call_n=_screen_n),
    display=Display("SPEED-RL", "#BCBD22", "SPEED-RL (screen with a few rollouts, drop 0% and 100% prompts, spend the "
                    "rest on the others; speed section)", order=55, dash=5),
), speed_step)
