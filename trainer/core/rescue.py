"""AERO's Stage II rescue, S1: adaptive rescue rounds for the prompts exploration left without a
correct rollout (arXiv 2602.14338, Algorithm 1's rescue loop, §4.2.1, Appendix "Budget
Constraints").

Pure functions over numpy arrays (numpy only, no torch), advanced round by round:

    state = start_rescue(strata, n_explore, n_total)        # budget B = (n_total - n_explore) P
    repeat
        plan = plan_rounds(state, R, ...)                  # R = aero.rounds_per_call
        generate plan.sum(0)[p] rollouts for prompt p in one engine call
        state, used = replay(state, plan, new_rewards)
    until plan is empty

``state.rescued_at`` then tells :func:`trainer.core.aero.curate` which prompts were rescued and
by which rollout. Every open interpretation (the budget split, speculative rounds) is a named
argument; docs/algorithms.md §4 step 3 lists them with defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from trainer.core.strata import Stratum, is_correct

SPLITS = ("prompt-order", "round-robin")


def plan_rescue_round(
    active, produced, budget_left: int, delta_n: int, n_max: int, split: str = "prompt-order"
) -> np.ndarray:
    """Rollouts each prompt gets in one rescue round (§4.2.1, Appendix 'Budget Constraints').

        want_p = min(delta_n, n_max - produced_p)  if active_p else 0     (never past n_max)
        give   = want                               if sum(want) <= budget_left
                 split(want, budget_left)           otherwise             (never past B)

    Budget splits when the budget cannot cover every share (deterministic, index order):
    - 'prompt-order': full shares to prompts in batch-index order; the last funded share may
      be partial, later prompts get 0. E.g. want [2,2,2], budget 3 -> [2,1,0].
    - 'round-robin': deal one rollout at a time to prompts in index order, cycling until the
      budget runs out. E.g. want [2,2,2], budget 4 -> [2,1,1]; budget 3 -> [1,1,1].

    Args:
        active: bool[P] prompts still being rescued.
        produced: int[P] rollouts already produced for each prompt (explore included).
    Returns:
        int[P] rollouts per prompt this round; sum <= max(budget_left, 0).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}; got {split!r}")
    active = np.asarray(active, dtype=bool)
    produced = np.asarray(produced, dtype=np.int64)
    want = np.where(active, np.clip(np.minimum(delta_n, n_max - produced), 0, None), 0).astype(np.int64)
    budget = max(int(budget_left), 0)
    if want.sum() <= budget:
        return want
    if split == "prompt-order":
        before = np.cumsum(want) - want
        return np.clip(budget - before, 0, want).astype(np.int64)
    # round-robin: fill whole "levels" L (everyone gets min(want, L)), then deal the rest of
    # the next level in index order. Equivalent to dealing one at a time, without the loop.
    give = np.zeros_like(want)
    for level in range(1, int(want.max()) + 1):
        nxt = np.minimum(want, level)
        if nxt.sum() > budget:
            break
        give = nxt
    rest = budget - int(give.sum())
    give[np.flatnonzero(want > give)[:rest]] += 1
    return give


@dataclass(frozen=True)
class RescueState:
    """Per-step rescue bookkeeping (S1), advanced round by round by pure functions.

    Attributes:
        active: bool[P] in the rescue set and not yet rescued. A prompt at n_max stays
            active but is planned 0 rollouts.
        produced: int[P] rollouts of each prompt that count, i.e. that sequential rounds would
            have produced (explore + rescue, generation order). These are the rollouts the
            caller passes to :func:`curate`.
        budget_left: rescue budget left, B = (n_total - n_explore) * P at the start; it is
            charged for every *generated* rollout, used or not, so a step never generates more
            than B rescue rollouts.
        rescued_at: int[P] index, within the prompt's rollout list, of its first correct rescue
            rollout (>= n_explore), or -1.
        rounds_used: rescue rounds that sequential execution would have run (rounds in which
            some prompt was still active and got rollouts); stops at K_max.
        unused: rollouts generated speculatively after their prompt's rescue (0 when R = 1).
    """

    active: np.ndarray
    produced: np.ndarray
    budget_left: int
    rescued_at: np.ndarray
    rounds_used: int = 0
    unused: int = 0

    @property
    def rescued(self) -> np.ndarray:
        return self.rescued_at >= 0


def start_rescue(strata, n_explore: int, n_total: int, P: int | None = None) -> RescueState:
    """Initial rescue state after exploration: budget B = (n_total - n_explore) * P (§4.2)."""
    strata = np.asarray(strata, dtype=np.int64)
    P = len(strata) if P is None else P
    if P != len(strata):
        raise ValueError(f"P={P} but {len(strata)} strata")
    return RescueState(
        active=strata == int(Stratum.RESCUE),
        produced=np.full(P, n_explore, dtype=np.int64),
        budget_left=(n_total - n_explore) * P,
        rescued_at=np.full(P, -1, dtype=np.int64),
    )


def plan_rounds(
    state: RescueState, rounds: int, *, delta_n: int, n_max: int, k_max: int, split: str = "prompt-order"
) -> np.ndarray:
    """Plan up to ``rounds`` rescue rounds at once, assuming no prompt is rescued inside the window.

    Each planned round is :func:`plan_rescue_round` applied to the state that sequential rounds
    would reach if every active prompt failed again (produced += counts, budget -= counts).
    The window stops early at K_max rounds in total, or when a round would be empty (no active
    prompt, every active prompt at n_max, or budget exhausted). ``rounds=1`` is the paper's
    sequential rescue, ``rounds=0`` every remaining round (``aero.rounds_per_call=0``); an empty
    result means the rescue phase is over.

    The caller generates ``plan[:, p].sum()`` rollouts for prompt p in one engine call and
    lists them in round order (round 1's block first); samples are i.i.d. given the policy,
    so assigning them to rounds in list order is exact. Then it calls :func:`replay`.

    Returns:
        int[R', P], R' <= rounds: rollouts per round and prompt.
    """
    P = len(state.active)
    plans, produced, budget = [], state.produced.copy(), state.budget_left
    left = k_max - state.rounds_used
    for _ in range(left if rounds == 0 else min(rounds, left)):
        counts = plan_rescue_round(state.active, produced, budget, delta_n, n_max, split)
        if counts.sum() == 0:
            break
        plans.append(counts)
        produced = produced + counts
        budget -= int(counts.sum())
    return np.stack(plans) if plans else np.zeros((0, P), dtype=np.int64)


def replay(state: RescueState, plan, new_rewards_per_prompt: Sequence) -> tuple[RescueState, list[np.ndarray]]:
    """Account a window of rescue rounds in generation order (speculative multi-round rescue).

    For round j = 1..R' and each prompt p still active before round j, the round's block of
    ``plan[j, p]`` rollouts is used: produced_p grows by it, and if the block holds a correct
    rollout, rescued_at_p = (position of its first correct rollout) and p stops being active.
    Blocks of rounds after p's rescue are generated-but-unused (``used`` False, ``unused``
    counted). The budget is charged for the whole plan (generated rollouts).

    Identity with sequential rounds (``rounds_per_call = 1``) on the same samples: the curated
    groups, ``produced``, ``rescued_at`` and ``rounds_used`` are identical whenever the budget
    does not bind inside any window, i.e. every planned round gives every active prompt its full
    share min(delta_n, n_max - produced_p). Proof sketch: sequential round j gives exactly that
    share to the prompts still active, which are the ones replay uses, with the same produced_p;
    rescued prompts get nothing in both. When the budget binds, speculation may have spent budget
    on prompts that turned out rescued earlier in the window, so a later prompt can get fewer
    rescue rollouts than sequentially (never more than B are generated either way).
    With ``rounds_per_call = 1`` this function *is* the sequential accounting.

    Args:
        plan: int[R', P] from :func:`plan_rounds`.
        new_rewards_per_prompt: length-P sequence; entry p holds the ``plan[:, p].sum()`` new
            rewards of prompt p in round order.
    Returns:
        (new state, used) where used[p] is bool[plan[:, p].sum()]: which new rollouts count.
        The caller appends the used ones, in order, to the prompt's rollout list.
    """
    plan = np.atleast_2d(np.asarray(plan, dtype=np.int64))
    P = len(state.active)
    if plan.shape[1] != P or len(new_rewards_per_prompt) != P:
        raise ValueError(f"plan must be [R, {P}] and rewards a length-{P} sequence")
    totals = plan.sum(0)
    rewards = [is_correct(r).reshape(-1) for r in new_rewards_per_prompt]
    for p in range(P):
        if len(rewards[p]) != totals[p]:
            raise ValueError(f"prompt {p}: plan has {totals[p]} rollouts but {len(rewards[p])} rewards were given")
    active, produced, rescued_at = state.active.copy(), state.produced.copy(), state.rescued_at.copy()
    used = [np.zeros(int(t), dtype=bool) for t in totals]
    offset, rounds = np.zeros(P, dtype=np.int64), state.rounds_used
    for counts in plan:
        live = active & (counts > 0)
        for p in np.flatnonzero(live).tolist():
            lo, hi = offset[p], offset[p] + counts[p]
            used[p][lo:hi] = True
            hits = np.flatnonzero(rewards[p][lo:hi])
            if hits.size:
                rescued_at[p] = produced[p] + hits[0]
                active[p] = False
            produced[p] += counts[p]
        offset += counts
        rounds += int(live.any())
    generated = int(totals.sum())
    n_used = sum(int(u.sum()) for u in used)
    new = replace(
        state,
        active=active,
        produced=produced,
        budget_left=state.budget_left - generated,
        rescued_at=rescued_at,
        rounds_used=rounds,
        unused=state.unused + generated - n_used,
    )
    return new, used
