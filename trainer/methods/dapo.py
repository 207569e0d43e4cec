"""DAPO (Yu et al. 2025): clip-higher, token-level loss, overlong reward shaping, dynamic sampling."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import numpy as np

import common.metric_keys as mk
from trainer.spec.config_types import Cap, Field, Issues, Strict
from trainer.methods.section import Section
from trainer.methods.spec import BOTH_ENGINES, Display, MethodSpec, Needs, VerlMapping, register
from trainer.methods.step import StepResult, group_advantages, strata_stats

if TYPE_CHECKING:
    from trainer.spec.config import RunConfig
    from trainer.methods.sampler import Sampler


class DAPOConfig(Strict):
    """DAPO (Yu et al. 2025): clip-higher, token-level loss, overlong shaping, dynamic sampling."""

    eps_low: float = Field(0.2, gt=0.0, lt=1.0, description="Lower clip range (DAPO: 0.2).")
    eps_high: float = Field(0.28, gt=0.0, description="Upper clip range, 'clip-higher' (DAPO: 0.28).")
    dynamic_sampling: bool = Field(True, description="Drop zero-variance groups and sample more prompt batches.")
    max_gen_rounds: Annotated[int, Cap("max_dapo_gen_rounds", "AERO_MAX_DAPO_GEN_ROUNDS", 64, "Cap on dapo.max_gen_rounds "
                                       "(prompt batches generated per step: each one costs a GRPO step's generation).")] = Field(
        1,
        ge=1,
        description="Cap on prompt batches generated per step. 1 = the same rollout budget as GRPO (default, for "
        "equal-budget comparisons); DAPO's paper keeps sampling (e.g. 3). When the cap is hit the step trains on the "
        "groups it has and counts it.",
    )
    overlong_buffer: int = Field(4, ge=0, le=1_048_576, description="Soft overlong punishment buffer L_cache in tokens (0 = off).")
    overlong_penalty: float = Field(1.0, ge=0.0, description="Maximum overlong penalty subtracted from the reward.")


def dapo_rules(cfg: RunConfig) -> Issues:
    issues = []
    if cfg.dapo.eps_high < cfg.dapo.eps_low:
        issues.append(("dapo.eps_high", f"must be >= dapo.eps_low ({cfg.dapo.eps_low})"))
    if cfg.dapo.overlong_buffer >= cfg.max_new_tokens:
        issues.append(("dapo.overlong_buffer", f"must be < max_new_tokens ({cfg.max_new_tokens})"))
    return issues


DAPO_SECTION = Section(
    name="dapo", model=DAPOConfig, title="DAPO", rules=dapo_rules,
    form=(("dapo.eps_low", "clip eps_low"), ("dapo.eps_high", "clip eps_high"),
          ("dapo.max_gen_rounds", "sampling cap (batches per step)"), ("dapo.dynamic_sampling", "dynamic sampling")),
)


def dapo_step(cfg: RunConfig, sampler: Sampler, rng: np.random.Generator | None = None, *, spec: MethodSpec) -> StepResult:
    """n_total rollouts per prompt, overlong-shaped rewards, dynamic sampling.

    Groups whose accuracy has zero variance are dropped; more prompt batches are generated
    until P groups are kept or ``dapo.max_gen_rounds`` batches were generated (default 1 =
    GRPO's budget). When the cap is hit the step trains on the groups it has (possibly none)
    and counts it in ``dapo/cap_hit`` (the DAPO recipe raises instead)."""
    import torch

    from trainer.core.dapo import nonzero_variance_mask, overlong_penalty

    d, P, n = cfg.dapo, cfg.batch_prompts, cfg.n_total
    kept: list[np.ndarray] = []  # global ids of each kept group
    reward, length = [], []
    first_correct, rounds, used, generated = None, 0, 0, 0
    while rounds < d.max_gen_rounds and len(kept) < P:
        Pb = sampler.next_prompts()
        used += Pb
        s = sampler.sample([n] * Pb, round_=rounds)
        generated += len(s)
        reward.append(s.reward)
        length.append(s.length)
        if first_correct is None:
            first_correct = s.correct_by_prompt(Pb)
        keep = (nonzero_variance_mask(torch.as_tensor(s.correct, dtype=torch.float64), torch.as_tensor(s.prompt_of_row))
                .numpy() if d.dynamic_sampling else np.ones(len(s), dtype=bool))
        groups = [rows for rows in s.rows_by_prompt(Pb) if len(rows) and keep[rows[0] - s.first_row]]
        kept += groups[: P - len(kept)]
        rounds += 1
    rows = np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)
    group = np.concatenate([np.full(len(g), i, dtype=np.int64) for i, g in enumerate(kept)]) if kept else rows.copy()
    all_reward, all_length = np.concatenate(reward), np.concatenate(length)
    shaped = (torch.tensor(all_reward[rows].tolist()) + overlong_penalty(
        torch.tensor(all_length[rows].tolist(), dtype=torch.float32), cfg.max_new_tokens, d.overlong_buffer,
        d.overlong_penalty)).numpy()
    stats = strata_stats(first_correct, n)
    stats[mk.ZERO_ACC_AFTER_RESCUE] = stats[mk.ZERO_ACC_AFTER_EXPLORE]
    stats.update({"dapo/gen_rounds": float(rounds), "dapo/kept_groups": float(len(kept)),
                  "dapo/cap_hit": float(len(kept) < P)})
    return StepResult(rows=rows, group=group, advantages=group_advantages(spec, cfg, shaped, group), prompts_used=used,
                      calls=rounds, generated=generated, stats=stats)


def _clip_higher(cfg: RunConfig) -> tuple[float, float]:
    return cfg.dapo.eps_low, cfg.dapo.eps_high


def _sampling_cap(cfg: RunConfig) -> int:
    return cfg.dapo.max_gen_rounds


DAPO = register(MethodSpec(
    name="dapo", family="dapo", sections=(DAPO_SECTION,), loss_agg="token-mean", clip="clip-higher",
    clip_of=_clip_higher, needs=Needs(engines=BOTH_ENGINES), verl=VerlMapping(prompt_batches=_sampling_cap),
    display=Display("DAPO", "#F58518", "DAPO (clip-higher, dynamic sampling)", order=10, dash=1),
), dapo_step)
