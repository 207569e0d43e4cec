"""AERO (arXiv 2602.14338, Algorithm 1) and its ablations aero-s1 and aero-s1s2.

The order of AERO's steps lives here, once, for every engine; the math is the shared core's
(trainer.core.aero; stratify from trainer.core.strata):

    1. explore   n_explore rollouts per prompt (one engine call)
    2. stratify  RESCUE / LOW / HIGH by correct count
    3. rescue    (S1) start_rescue; repeat plan_rounds -> one engine call -> replay, until the
                 plan is empty; rounds_per_call rounds per call, replayed in generation order
    4. curate    (S2 Bayesian zero-variance groups, S3 rejection sampling of negatives)
    5. report    training rows with their advantages (S2's Beta-posterior baseline u~ on zero-
                 variance groups, eq. 6), strata/rescue/groups metrics, the savings as cost metrics

The ``aero`` config section (:class:`AEROConfig`) and its rules live here too.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np

import common.metric_keys as mk
from trainer.spec.config_types import Cap, Field, Issues, Strict, basic
from trainer.methods.aero_strategies import ALL, NONE, AeroStrategies
from trainer.methods.section import Section
from trainer.methods.spec import BOTH_ENGINES, Display, MethodSpec, Needs, VerlMapping, register
from trainer.methods.step import StepResult, strata_stats

if TYPE_CHECKING:
    from trainer.spec.config import RunConfig
    from trainer.methods.sampler import Sampler


class AEROConfig(Strict):
    """AERO allocation and curation (paper §4, Algorithm 1, Table 9 'AERO Sampling')."""

    n_explore: int = Field(8, ge=1, le=4096, description="Stage I exploration rollouts per prompt (paper: 8).",
                           json_schema_extra=basic())
    n_max: Annotated[int, Cap("max_aero_n_max", "AERO_MAX_AERO_N_MAX", 1024, "Cap on aero.n_max.")] = Field(
        32, ge=1, description="Cap on rollouts per prompt, exploration included (paper: 32).", json_schema_extra=basic())
    delta_n: Annotated[int, Cap("max_aero_delta_n", "AERO_MAX_AERO_DELTA_N", 1024, "Cap on aero.delta_n (rescue "
                                "rollouts per prompt per round).")] = Field(
        2, ge=1, description="Extra rollouts per rescue prompt per rescue round (paper: 2 math, 4 code).")
    k_max: Annotated[int, Cap("max_aero_k_max", "AERO_MAX_AERO_K_MAX", 100, "Cap on aero.k_max.", ge=0)] = Field(
        10, ge=0, description="Maximum rescue rounds K_max (paper: 10 math, 3 code).")
    tau: float = Field(0.5, gt=0.0, le=1.0, description="Success-rate threshold between low- and high-success strata (paper: 0.5).")
    S: int = Field(0, ge=0, le=4096, description="Rescue threshold on correct count: prompts with c <= S are rescued (paper: 0).")
    k: Annotated[float, Cap("max_aero_k", "AERO_MAX_AERO_K", 1000.0, "Cap on aero.k (always finite).")] = Field(
        1.0, allow_inf_nan=False, le=1e6, description="Negatives kept per positive in low-success groups, "
                     "m = min(k*c, #incorrect) (paper: 1; Thm 4.1 optimum).")
    alpha0: float = Field(1.0, description="Beta prior alpha for the Bayesian baseline (paper: 1).")
    beta0: float = Field(1.0, description="Beta prior beta for the Bayesian baseline (paper: 1).")
    zero_variance_keep: int = Field(4, ge=1, le=4096, description="Rollouts kept from a zero-variance group under S2 (paper §4.4: 4).")
    negative_selection: Literal["random", "first", "longest", "shortest"] = Field(
        "random",
        description="Which incorrect rollouts S3 keeps. The paper says 'top-m most informative' without a definition; "
        "default: uniformly at random (seeded). 'first' = generation order.",
    )
    rescue_negative: Literal["first", "random"] = Field(
        "first", description="Which incorrect rollout joins the first correct one in a rescued group of 2."
    )
    zero_variance_selection: Literal["first", "random"] = Field(
        "first", description="Which rollouts an S2 zero-variance group keeps."
    )
    budget_split: Literal["prompt-order", "round-robin"] = Field(
        "prompt-order",
        description="When the rescue budget cannot give delta_n to every active prompt in a round: 'prompt-order' gives "
        "full delta_n shares in batch order (the last share may be partial); 'round-robin' deals one rollout at a time.",
    )
    rounds_per_call: int = Field(
        0,
        ge=0,
        le=1_000,
        description="Rescue rounds generated per engine call. 0 (default) = every round (up to k_max) in ONE call, "
        "replayed in generation order: the curated groups equal the paper's sequential rounds on the same samples "
        "whenever the budget does not bind (rescue/budget_left > 0); rollouts after a prompt's rescue are generated "
        "(and charged in FLOPs) but not trained. 1 = the paper's sequential rounds, one engine call each (slower by "
        "one call per round). R > 1: R rounds per call.",
    )


def aero_rules(cfg: RunConfig) -> Issues:
    """AERO's cross-field rules (paper §4.2.1, Algorithm 1), each naming the field to change."""
    a, issues = cfg.aero, []
    if a.n_explore > cfg.n_total:
        issues.append(("aero.n_explore", f"must be <= n_total ({cfg.n_total}); got {a.n_explore}"))
    if a.n_max < a.n_explore:
        issues.append(("aero.n_max", f"must be >= aero.n_explore ({a.n_explore}); got {a.n_max}"))
    if a.S * 2 > a.n_explore:
        issues.append(("aero.S", f"must be in [0, n_explore/2] (paper §4.2.1); got {a.S} with n_explore {a.n_explore}"))
    if a.k < 1:
        issues.append(("aero.k", f"must be >= 1 (a 1:k positive:negative mix); got {a.k}"))
    if a.alpha0 <= 0:
        issues.append(("aero.alpha0", f"must be > 0 (Beta prior); got {a.alpha0}"))
    if a.beta0 <= 0:
        issues.append(("aero.beta0", f"must be > 0 (Beta prior); got {a.beta0}"))
    return issues


AERO_SECTION = Section(
    name="aero", model=AEROConfig, title="AERO sampling (paper defaults)", rules=aero_rules,
    form=(("aero.n_explore", "n_explore"), ("aero.n_max", "n_max"), ("aero.delta_n", "delta_n"),
          ("aero.k_max", "K_max"), ("aero.tau", "tau"), ("aero.S", "S"), ("aero.k", "k"),
          ("aero.alpha0", "alpha0"), ("aero.beta0", "beta0")),
)


def aero_step(cfg: RunConfig, sampler: Sampler, rng: np.random.Generator, *, spec: MethodSpec) -> StepResult:
    """One AERO step (module docstring) on one batch of P prompts; ``rng`` draws S3's random
    negatives. The ablations switch S2/S3 off through their spec's ``aero`` strategies."""
    return aero_step_with_ledger(cfg, sampler, rng, spec=spec)[0]


def aero_step_with_ledger(cfg: RunConfig, sampler: Sampler, rng: np.random.Generator, *, spec: MethodSpec,
                          first: np.ndarray | None = None, rescue_budget: int | None = None,
                          no_rescue: np.ndarray | None = None) -> tuple[StepResult, dict]:
    """:func:`aero_step`, plus its per-prompt ledger (strata, rescued, produced, correct,
    mean_tokens: the inputs of the counterfactual savings).

    ``first`` (int[P], >= 1) and ``rescue_budget`` are aero-mem's hooks (trainer/methods/
    aero_mem.py): each prompt's first-call rollouts, stratified on all of them and counted as
    produced when its rescue starts, and the rescue pool. The defaults, n_explore each and
    (n_total - n_explore) * P, are AERO. ``no_rescue`` (bool[P]) marks prompts aero-mem has
    given up on this step: explored and curated as usual, never rescued."""
    import torch

    from trainer.core.aero import CurationRules, aero_advantages, curate
    from trainer.core.strata import stratify

    a = cfg.aero
    strategies = spec.aero if spec.aero is not None else NONE
    P = sampler.next_prompts()
    n_first = np.full(P, a.n_explore, dtype=np.int64) if first is None else np.asarray(first, dtype=np.int64)
    may_rescue = np.full(P, strategies.s1) & (True if no_rescue is None else ~np.asarray(no_rescue, dtype=bool))
    budget = (cfg.n_total - a.n_explore) * P if rescue_budget is None else int(rescue_budget)
    run = explore_and_rescue_stream if cfg.rollout.schedule == "continuous" else explore_and_rescue_calls
    log, rows_of, correct, state, calls = run(cfg, sampler, n_first, may_rescue, budget)
    strata = stratify(correct, n_first, a.S, a.tau)
    ok, length, tokens, reward = log.column("correct"), log.column("length"), log.column("tokens"), log.column("reward")
    rules = CurationRules.from_config(a, strategies, n_explore=int(n_first.min(initial=a.n_explore)))
    cur = curate([ok[r].astype(np.float64) for r in rows_of], strata, state.rescued_at, rules,
                 lengths_by_prompt=[length[r] for r in rows_of], rng=rng)
    prompt_idx, pos, gid = cur.flat()
    rows = np.array([rows_of[p][i] for p, i in zip(prompt_idx.tolist(), pos.tolist())], dtype=np.int64)
    adv = aero_advantages(torch.tensor(reward[rows].tolist()), torch.as_tensor(gid), cur.kinds, cur.u_tilde, eps=1e-6,
                          unbiased=cfg.std_unbiased, normalize_std=spec.divides_by_std(cfg)).numpy() \
        if len(rows) else torch.zeros(0).numpy()
    stats = strata_stats(correct, n_first, a.S, a.tau)
    stats.update({
        mk.ZERO_ACC_AFTER_RESCUE: float((cur.correct == 0).mean()),
        "rescue/rescued": float(state.rescued.sum()), "rescue/rounds": float(state.rounds_used),
        "rescue/calls": float(calls - 1), "rescue/generated": float(len(log) - int(n_first.sum())),
        "rescue/unused": float(state.unused), "rescue/budget_left": float(state.budget_left),
        **{f"groups/{kind}": float(cur.kinds.count(kind)) for kind in ("rescued", "bayes", "low", "high", "zero")},
    })
    ledger = dict(strata=strata, rescued=np.array([k == "rescued" for k in cur.kinds]), produced=cur.produced,
                  correct=cur.correct, mean_tokens=np.array([tokens[r].mean() for r in rows_of]))
    return StepResult(rows=rows, group=gid, advantages=adv, prompts_used=P, calls=calls, generated=len(log),
                      stats=stats, cost_metrics=partial(savings_metrics, cfg, ledger)), ledger


def explore_and_rescue_calls(cfg: RunConfig, sampler: Sampler, n_first: np.ndarray, may_rescue: np.ndarray,
                              budget: int):
    """Exploration, then rescue windows of ``aero.rounds_per_call`` rounds, one engine call each
    (steps 1-3 of the module docstring). Returns (row log, each prompt's rows that count, in
    generation order, exploration's correct counts, the final RescueState, engine calls)."""
    from trainer.core.rescue import plan_rounds, replay, start_rescue
    from trainer.core.strata import Stratum, stratify
    from trainer.methods.sampler import RowLog

    a, P = cfg.aero, len(n_first)
    log = RowLog()
    explore = log.add(sampler.sample(n_first.tolist(), round_=0))
    rows_of = explore.rows_by_prompt(P)
    correct = explore.correct_by_prompt(P)
    strata = np.where(may_rescue, stratify(correct, n_first, a.S, a.tau), int(Stratum.HIGH))
    state = replace(start_rescue(strata, a.n_explore, cfg.n_total, P), produced=n_first.copy(), budget_left=budget)
    calls = 1
    while True:
        plan = plan_rounds(state, a.rounds_per_call, delta_n=a.delta_n, n_max=a.n_max, k_max=a.k_max,
                           split=a.budget_split)
        if len(plan) == 0:
            break
        new = log.add(sampler.sample(plan.sum(0).tolist(), round_=state.rounds_used + 1))
        calls += 1
        new_rows = new.rows_by_prompt(P)
        state, used = replay(state, plan, [new.correct[r - new.first_row].astype(np.float64) for r in new_rows])
        rows_of = [np.concatenate([rows_of[p], new_rows[p][used[p]]]) for p in range(P)]
    return log, rows_of, correct, state, calls


def explore_and_rescue_stream(cfg: RunConfig, sampler: Sampler, n_first: np.ndarray, may_rescue: np.ndarray,
                               budget: int):
    """:func:`explore_and_rescue_calls` in ONE continuous batch (``rollout.schedule="continuous"``):
    a prompt's rescue window joins the batch when its exploration, or its last window, is scored
    (trainer/core/rescue_stream.py says when that equals separate calls: always, per prompt)."""
    from trainer.core.rescue_stream import RescueRules, RescueStream
    from trainer.methods.sampler import RowLog

    a, P = cfg.aero, len(n_first)
    if (n_first < 1).any():  # nothing would start such a prompt's rescue in the stream: separate calls do it
        return explore_and_rescue_calls(cfg, sampler, n_first, may_rescue, budget)
    plan = RescueStream(may_rescue, n_first, budget, RescueRules(S=a.S, tau=a.tau, rounds=a.rounds_per_call,
                        delta_n=a.delta_n, n_max=a.n_max, k_max=a.k_max, split=a.budget_split))
    rows_of: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * P
    correct = np.zeros(P, dtype=np.int64)

    def react(block, round_: int):
        p = int(block.prompt_of_row[0])
        if round_ == 0:
            rows_of[p], correct[p] = block.ids, int(block.correct.sum())
            return plan.explored(p, int(correct[p]))
        used, asks = plan.scored(p, block.correct)
        rows_of[p] = np.concatenate([rows_of[p], block.ids[used]])
        return asks

    log = RowLog()
    for part in sampler.stream(n_first.tolist(), react):
        log.add(part)
    return log, rows_of, correct, plan.state(), 1


def savings_metrics(cfg: RunConfig, ledger: dict, flops_per_token: float, seconds_per_token: float) -> dict[str, float]:
    """Counterfactual S1/S2/S3 savings against GRPO at the same budget (trainer.core.savings),
    in trained rollouts, tokens, FLOPs and seconds (seconds from this step's measured cost per
    trained token)."""
    from trainer.core.savings import savings_cost, waterfall

    w = waterfall(**ledger, n_total=cfg.n_total, zero_variance_keep=cfg.aero.zero_variance_keep, k=cfg.aero.k)
    cost = savings_cost(w.saved_tokens, flops_per_token, seconds_per_token)
    out = {mk.SAVINGS_GRPO_ROLLOUTS: w.rollouts["grpo"], mk.SAVINGS_GRPO_TOKENS: w.tokens["grpo"]}
    for s in ("s1", "s2", "s3"):
        out.update({f"savings/{s}_rollouts": w.saved_rollouts[s], f"savings/{s}_tokens": w.saved_tokens[s],
                    f"savings/{s}_flops": cost["flops"][s], f"savings/{s}_s": cost["seconds"][s]})
    return out


def _n_explore(cfg: RunConfig) -> int:
    return cfg.aero.n_explore


# Exploration is verl's rollout.n; the curated loop runs the rescue and trains this step's advantages.
AERO_VERL = VerlMapping(rollout_n="n_explore", first_call_n=_n_explore)


def _aero(name: str, label: str, colour: str, order: int, dash: int, strategies: AeroStrategies,
          description: str) -> MethodSpec:
    return register(MethodSpec(name=name, family="aero", sections=(AERO_SECTION,), aero=strategies,
                               needs=Needs(engines=BOTH_ENGINES, streams=True), verl=AERO_VERL,
                               display=Display(label, colour, description, order, dash)), aero_step)


AERO = _aero("aero", "AERO", "#E45756", 20, 4, ALL,
             "AERO (S1 rescue + S2 Bayesian + S3 rejection sampling)")
AERO_S1 = _aero("aero-s1", "AERO S1 only", "#72B7B2", 21, 3, AeroStrategies(True, False, False),
               "AERO ablation: S1 rescue only")
AERO_S1S2 = _aero("aero-s1s2", "AERO S1+S2", "#B279A2", 22, 5, AeroStrategies(True, True, False),
                  "AERO ablation: S1 + S2")
