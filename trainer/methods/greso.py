"""GRESO (Zheng et al. 2025, "Act Only When It Pays: Efficient Reinforcement Learning for LLM
Reasoning via Selective Rollouts", arXiv 2506.02177): skip, before any rollout, the prompts
whose history predicts a zero-variance group, each with a probability of being revisited.

    1. draw a batch; for each prompt, z = its streak of consecutive zero-variance visits and
       its kind (easy: last group all-correct; hard: all-wrong)
    2. roll it out with probability p_kind^z (§4.1; z = 0 always), the draw seeded by (run
       seed, step, prompt id); the others are skipped, nothing generated
    3. if fewer than P prompts were selected, draw further batches (at most ``max_batches``
       per step, §4.2 "adaptive batch size" bounded) until P are selected; each selected
       prompt gets n_total rollouts, so a step never generates more than GRPO's n_total * P
    4. train every rollout of the selected prompts, GRPO advantages per prompt group
    5. update each sampled prompt's streak; then adapt the bases (§4.2): p_easy falls by
       ``step`` when the share of all-correct groups among the sampled prompts exceeds
       ``target_easy``, rises otherwise (p_hard likewise with all-wrong), within [p_min, 1]

Departures from the paper (docs/algorithms.md "GRESO"): "history" is the prompt's visits on our
finite training set (``train_size``), one per epoch; the paper fills a fixed training batch
with post-rollout dynamic sampling and any number of rollout batches, here the search is
capped (max_batches) and zero-variance groups that slip through are trained (their advantage
is zero), so the budget per step is GRPO's or less.
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

STATE_KEY = "greso"
EASY, HARD = 1, 0


class GRESOConfig(Strict):
    """GRESO pre-rollout filtering (arXiv 2506.02177 §4). Needs stable prompt ids (train_size on
    the arithmetic task)."""

    p_easy: float = Field(0.5, ge=0.0, le=1.0, description="Initial base exploration probability of easy prompts "
                          "(last group all-correct): rolled out with p_easy^z after z zero-variance visits.")
    p_hard: float = Field(0.5, ge=0.0, le=1.0, description="Initial base exploration probability of hard prompts "
                          "(last group all-wrong): p_hard^z.")
    target_easy: float = Field(0.083, ge=0.0, le=1.0, description="Target share of all-correct groups among the "
                               "sampled prompts; above it p_easy falls (paper: about 1/12).")
    target_hard: float = Field(0.167, ge=0.0, le=1.0, description="Target share of all-wrong groups; above it p_hard "
                               "falls (paper: about 1/6).")
    step: float = Field(0.01, ge=0.0, le=1.0, description="Adjustment of p_easy / p_hard per training step (paper: 0.01).")
    p_min: float = Field(0.05, ge=0.0, le=1.0, description="Floor of p_easy and p_hard, so every prompt keeps a chance "
                         "to be revisited.")
    max_batches: int = Field(2, ge=1, le=64, description="Prompt batches a step may draw to replace skipped prompts "
                             "(1 = skipped prompts' budget stays unspent). Rollouts never exceed n_total * batch_prompts.")


def greso_rules(cfg: RunConfig) -> Issues:
    g = cfg.greso
    return [(f"greso.{f}", f"must be >= greso.p_min ({g.p_min})") for f in ("p_easy", "p_hard")
            if getattr(g, f) < g.p_min]


GRESO_SECTION = Section(
    name="greso", model=GRESOConfig, title="GRESO (selective rollout)", rules=greso_rules,
    form=(("train_size", "train_size (finite set; 0 = stream)"), ("greso.p_easy", "p_easy (initial)"),
          ("greso.p_hard", "p_hard (initial)"), ("greso.target_easy", "target all-correct share"),
          ("greso.target_hard", "target all-wrong share"), ("greso.max_batches", "batches per step")),
)


def select(streak: list[list[int] | None], bases: tuple[float, float], draws: np.ndarray) -> np.ndarray:
    """bool[P]: the prompts rolled out (step 2): draw < p_kind^z; an unknown prompt (None) always."""
    from trainer.core.allocation import rollout_probability

    z = np.array([s[0] if s else 0 for s in streak], dtype=float)
    base = np.array([bases[0] if s and s[1] == EASY else bases[1] for s in streak], dtype=float)
    return np.asarray(draws) < rollout_probability(z, base)


def remember(memory: dict, keys: list, correct: np.ndarray, n: np.ndarray) -> None:
    """Step 5's streaks: +1 (and the kind) after a zero-variance group, 0 otherwise."""
    for key, c, k in zip(keys, correct.tolist(), n.tolist()):
        if key is None or k == 0:
            continue
        if c in (0, k):
            z = memory.get(key, [0, HARD])[0]
            memory[key] = [z + 1, EASY if c == k else HARD]
        else:
            memory[key] = [0, HARD]


def greso_step(cfg: RunConfig, sampler: Sampler, rng: np.random.Generator | None = None, *, spec: MethodSpec) -> StepResult:
    """One GRESO step (module docstring); streaks and bases live in ``sampler.state``."""
    from trainer.core.allocation import adapt_base
    from trainer.core.memory import revisit_draws

    g, n = cfg.greso, cfg.n_total
    saved = sampler.state.get(STATE_KEY) or {"clock": 0, "streak": {}, "p_easy": g.p_easy, "p_hard": g.p_hard}
    clock, memory = saved["clock"] + 1, dict(saved["streak"])
    bases = (saved["p_easy"], saved["p_hard"])
    want, used, batches, skipped = cfg.batch_prompts, 0, 0, 0
    rows, groups, rewards, correct_all = [], [], [], []
    while want > 0 and batches < g.max_batches:
        Pb, keys = sampler.next_prompts(), sampler.prompt_keys()
        used, batches = used + Pb, batches + 1
        chosen = select([memory.get(k) if k is not None else None for k in keys], bases,
                        revisit_draws(cfg.seed, clock * 1000 + batches, keys, salt="greso"))
        skipped += int((~chosen).sum())
        chosen &= np.cumsum(chosen) <= want  # never more than P prompts in a step
        if not chosen.any():
            continue
        counts = np.where(chosen, n, 0)
        s = sampler.sample(counts.tolist(), round_=batches - 1)
        c = s.correct_by_prompt(Pb)
        remember(memory, keys, c, counts)
        rows.append(s.ids)
        groups.append(s.prompt_of_row + (used - Pb))  # unique across batches
        rewards.append(s.reward)
        correct_all.append(c[chosen])
        want -= int(chosen.sum())
    correct = np.concatenate(correct_all) if correct_all else np.zeros(0, dtype=np.int64)
    sampled = max(len(correct), 1)
    easy_share, hard_share = float((correct == n).sum()) / sampled, float((correct == 0).sum()) / sampled
    p_easy = adapt_base(bases[0], easy_share, g.target_easy, g.step, g.p_min) if len(correct) else bases[0]
    p_hard = adapt_base(bases[1], hard_share, g.target_hard, g.step, g.p_min) if len(correct) else bases[1]
    sampler.state[STATE_KEY] = {"clock": clock, "streak": memory, "p_easy": p_easy, "p_hard": p_hard}
    return _result(spec, cfg, rows, groups, rewards, correct, used, batches,
                   {"greso/skipped": float(skipped), "greso/sampled": float(len(correct)), "greso/batches": float(batches),
                    "greso/p_easy": p_easy, "greso/p_hard": p_hard, "greso/unspent": float(n * cfg.batch_prompts - n * len(correct))})


def _result(spec: MethodSpec, cfg: RunConfig, rows: list, groups: list, rewards: list, correct: np.ndarray, used: int,
            calls: int, extra: dict[str, float]) -> StepResult:
    """The trained rows (every rollout of the sampled prompts), their groups renumbered from 0."""
    if not rows:
        return StepResult.nothing_trained(used, {mk.ZERO_ACC_AFTER_EXPLORE: 0.0, mk.ZERO_ACC_AFTER_RESCUE: 0.0, **extra})
    row, raw = np.concatenate(rows), np.concatenate(groups)
    _, group = np.unique(raw, return_inverse=True)
    stats = {**strata_stats(correct, cfg.n_total), **extra}
    stats[mk.ZERO_ACC_AFTER_RESCUE] = stats[mk.ZERO_ACC_AFTER_EXPLORE]
    return StepResult(rows=row, group=group.astype(np.int64), advantages=group_advantages(spec, cfg, np.concatenate(rewards), group),
                      prompts_used=used, calls=len(rows), generated=len(row), stats=stats)


def _batches(cfg: RunConfig) -> int:
    return cfg.greso.max_batches


GRESO = register(MethodSpec(
    name="greso", family="greso", sections=(GRESO_SECTION,),
    # streaks live in the sampler's state (checkpointed by both engines), keyed by stable prompt ids
    needs=Needs(engines=BOTH_ENGINES, prompt_ids=True), verl=VerlMapping(prompt_batches=_batches),
    display=Display("GRESO", "#11A579", "GRESO (skip prompts whose history predicts zero variance, with revisits; "
                    "greso section)", order=60, dash=0),
), greso_step)
