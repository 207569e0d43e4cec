"""DAPO (Yu et al. 2025): clip-higher, token-level loss, overlong reward shaping, dynamic sampling."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

import common.metric_keys as mk
from trainer.methods.spec import MethodSpec, VerlMapping, register
from trainer.methods.step import StepResult, strata_stats

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from trainer.methods.sampler import Sampler


def dapo_step(cfg: RunConfig, sampler: Sampler, rng: np.random.Generator | None = None) -> StepResult:
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
    stats = strata_stats(first_correct, n, cfg)
    stats[mk.ZERO_ACC_AFTER_RESCUE] = stats[mk.ZERO_ACC_AFTER_EXPLORE]
    stats.update({"dapo/gen_rounds": float(rounds), "dapo/kept_groups": float(len(kept)),
                  "dapo/cap_hit": float(len(kept) < P)})
    return StepResult(rows=rows, group=group, prompts_used=used, calls=rounds, generated=generated, stats=stats,
                      shaped=shaped)


DAPO = register(MethodSpec(
    name="dapo", label="DAPO", colour="#F58518", family="dapo", order=10, config_section="dapo",
    description="DAPO (clip-higher, dynamic sampling)", loss_agg="token-mean", clip="clip-higher",
    verl=VerlMapping(stock_fit=False),
    metric_keys=("dapo/gen_rounds", "dapo/kept_groups", "dapo/cap_hit"),
    dash=1,
), dapo_step)
