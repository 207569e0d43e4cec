"""AERO (arXiv 2602.14338, Algorithm 1) and its ablations aero-s1 and aero-s1s2.

The order of AERO's steps lives here, once, for every engine; the math is the shared core's
(trainer.core.aero):

    1. explore   n_explore rollouts per prompt (one engine call)
    2. stratify  RESCUE / LOW / HIGH by correct count
    3. rescue    (S1) start_rescue; repeat plan_rounds -> one engine call -> replay, until the
                 plan is empty; rounds_per_call rounds per call, replayed in generation order
    4. curate    (S2 Bayesian zero-variance groups, S3 rejection sampling of negatives)
    5. report    training rows, group kinds and u~, strata/rescue/groups metrics, savings ledger
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

import common.metric_keys as mk
from trainer.methods.spec import MethodSpec, VerlMapping, register
from trainer.methods.step import StepResult, strata_stats

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from trainer.methods.sampler import Sampler

METRICS = ("rescue/*", "groups/*", "savings/*")


def aero_step(cfg: RunConfig, sampler: Sampler, rng: np.random.Generator, *, first: np.ndarray | None = None,
              rescue_budget: int | None = None, no_rescue: np.ndarray | None = None) -> StepResult:
    """One AERO step (module docstring) on one batch of P prompts; ``rng`` draws S3's random
    negatives. The ablations switch S2/S3 off through their spec's strategies.

    ``first`` (int[P], >= 1) and ``rescue_budget`` are aero-mem's hooks (trainer/methods/
    aero_mem.py): each prompt's first-call rollouts, stratified on all of them and counted as
    produced when its rescue starts, and the rescue pool. The defaults, n_explore each and
    (n_total - n_explore) * P, are AERO. ``no_rescue`` (bool[P]) marks prompts aero-mem has
    given up on this step: explored and curated as usual, never rescued."""
    from trainer.core.aero import Stratum, curate, plan_rounds, replay, start_rescue, stratify
    from trainer.methods.sampler import RowLog
    from trainer.methods.spec import get_method

    a = cfg.aero
    s1, s2, s3 = get_method(cfg.method).strategies
    P = sampler.next_prompts()
    log = RowLog()
    n_first = np.full(P, a.n_explore, dtype=np.int64) if first is None else np.asarray(first, dtype=np.int64)
    explore = log.add(sampler.sample(n_first.tolist(), round_=0))
    rows_of = explore.rows_by_prompt(P)
    correct = explore.correct_by_prompt(P)
    strata = stratify(correct, n_first, a.S, a.tau)
    state = start_rescue(strata if s1 else np.full(P, int(Stratum.HIGH)), a.n_explore, cfg.n_total, P)
    if first is not None or rescue_budget is not None:
        state = replace(state, produced=n_first.copy(),
                        budget_left=state.budget_left if rescue_budget is None else int(rescue_budget))
    if no_rescue is not None:
        state = replace(state, active=state.active & ~np.asarray(no_rescue, dtype=bool))
    calls = 1
    while s1:
        plan = plan_rounds(state, a.rounds_per_call, delta_n=a.delta_n, n_max=a.n_max, k_max=a.k_max,
                           split=a.budget_split)
        if len(plan) == 0:
            break
        new = log.add(sampler.sample(plan.sum(0).tolist(), round_=state.rounds_used + 1))
        calls += 1
        new_rows = new.rows_by_prompt(P)
        state, used = replay(state, plan, [new.correct[r - new.first_row].astype(np.float64) for r in new_rows])
        rows_of = [np.concatenate([rows_of[p], new_rows[p][used[p]]]) for p in range(P)]
    ok, length, tokens = log.column("correct"), log.column("length"), log.column("tokens")
    cur = curate([ok[r].astype(np.float64) for r in rows_of], strata, state.rescued_at, s1=s1, s2=s2, s3=s3,
                 n_explore=int(n_first.min(initial=a.n_explore)), alpha0=a.alpha0, beta0=a.beta0, k=a.k,
                 zero_variance_keep=a.zero_variance_keep,
                 negative_selection=a.negative_selection, rescue_negative=a.rescue_negative,
                 zero_variance_selection=a.zero_variance_selection, lengths_by_prompt=[length[r] for r in rows_of],
                 rng=rng)
    prompt_idx, pos, gid = cur.flat()
    rows = np.array([rows_of[p][i] for p, i in zip(prompt_idx.tolist(), pos.tolist())], dtype=np.int64)
    stats = strata_stats(correct, n_first, cfg)
    stats.update({
        mk.ZERO_ACC_AFTER_RESCUE: float((cur.correct == 0).mean()),
        "rescue/rescued": float(state.rescued.sum()), "rescue/rounds": float(state.rounds_used),
        "rescue/calls": float(calls - 1), "rescue/generated": float(len(log) - len(explore)),
        "rescue/unused": float(state.unused), "rescue/budget_left": float(state.budget_left),
        **{f"groups/{kind}": float(cur.kinds.count(kind)) for kind in ("rescued", "bayes", "low", "high", "zero")},
    })
    ledger = dict(strata=strata, rescued=np.array([k == "rescued" for k in cur.kinds]), produced=cur.produced,
                  correct=cur.correct, mean_tokens=np.array([tokens[r].mean() for r in rows_of]))
    return StepResult(rows=rows, group=gid, prompts_used=P, calls=calls, generated=len(log), stats=stats,
                      kinds=cur.kinds, u_tilde=cur.u_tilde, ledger=ledger)


_VERL = VerlMapping(rollout_n="n_explore", stock_fit=False)
_COMMON = dict(family="aero", config_section="aero", verl=_VERL, metric_keys=METRICS)

AERO = register(MethodSpec(
    name="aero", label="AERO", colour="#E45756", order=20, strategies=(True, True, True), dash=4,
    description="AERO (S1 rescue + S2 Bayesian + S3 rejection sampling)", **_COMMON,
), aero_step)
AERO_S1 = register(MethodSpec(
    name="aero-s1", label="AERO S1 only", colour="#72B7B2", order=21, strategies=(True, False, False), dash=3,
    description="AERO ablation: S1 rescue only", **_COMMON,
), aero_step)
AERO_S1S2 = register(MethodSpec(
    name="aero-s1s2", label="AERO S1+S2", colour="#B279A2", order=22, strategies=(True, True, False), dash=5,
    description="AERO ablation: S1 + S2", **_COMMON,
), aero_step)
