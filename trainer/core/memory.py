"""Prompt memory across epochs for AERO (aero-mem; beyond the paper, docs/algorithms.md §7).

AERO learns a prompt's difficulty from scratch each time the prompt is drawn: it explores
with n_explore rollouts even for a prompt it solved 8/8 last epoch, and starts rescue from
zero for one that failed every epoch so far. This module carries each prompt's record across
steps as a Beta posterior over its success rate p, keyed by a stable prompt id, and turns it
into a per-step plan:

    post  = recall(memory, ids, clock)                  # discounted to now; unseen -> prior
    plan  = plan_step(post, rules, ...)                 # (a) explore sizes, (b) reserve, (c) skip,
                                                        # (d) no rescue for hopeless prompts
    ... explore, stratify, rescue from plan.rescue_budget (trainer.core.rescue), curate (trainer.core.aero) ...
    memory = remember(memory, ids, clock, correct, n)   # after the prompts were sampled

The paper has none of this; every rule below is ours, and its options are named arguments
(plan_step's: the fields of :class:`MemoryRules`).
Budget rule: a step never generates more than n_total * P rollouts. Exploration savings from
(a) and (c) are *not spent* (the rescue pool stays AERO's (n_total - n_explore) * P), because
the target is compute to reach an accuracy, and unspent rollouts are the compute saved. The
reserve of (b) is taken out of that pool, not added to it, and (d) removes the rescue share
of each prompt it gives up on.

numpy, scipy (the Beta tail, imported on first use) and the stdlib (no torch): the store is a plain dict and round-trips through
``to_dict`` / ``from_dict`` for the checkpoint (exact resume).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

import numpy as np

# ---------------------------------------------------------------------------- Beta posterior


def update(alpha, beta, correct, n) -> tuple[np.ndarray, np.ndarray]:
    """Beta-Binomial conjugate update after a prompt was sampled n times with c correct:

        alpha' = alpha + c,   beta' = beta + (n - c)

    Elementwise over arrays; n = 0 (a skipped prompt) leaves the posterior unchanged."""
    alpha, beta = np.asarray(alpha, dtype=np.float64), np.asarray(beta, dtype=np.float64)
    c, n = np.asarray(correct, dtype=np.float64), np.asarray(n, dtype=np.float64)
    if (c < 0).any() or (c > n).any():
        raise ValueError("correct counts must be in [0, n]")
    return alpha + c, beta + (n - c)


def discount(alpha, beta, elapsed, gamma: float, alpha0: float, beta0: float) -> tuple[np.ndarray, np.ndarray]:
    """Exponential forgetting toward the prior as the policy moves:

        alpha' = alpha0 + gamma^elapsed * (alpha - alpha0)     (beta likewise)

    ``elapsed`` = training steps since the prompt was last seen (the policy changes every
    step, so evidence ages by steps, not by visits). gamma = 1 never forgets; gamma = 0 forgets
    at once (AERO's from-scratch view). Evidence, not the prior, decays, so a long-unseen
    prompt returns to Beta(alpha0, beta0) and counts as unknown again."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1]; got {gamma}")
    e = np.asarray(elapsed, dtype=np.float64)
    if (e < 0).any():
        raise ValueError("elapsed steps must be >= 0")
    w = np.power(gamma, e)  # 0 ** 0 = 1: no decay within the step a prompt was seen
    alpha, beta = np.asarray(alpha, dtype=np.float64), np.asarray(beta, dtype=np.float64)
    return alpha0 + w * (alpha - alpha0), beta0 + w * (beta - beta0)


def posterior_mean(alpha, beta) -> np.ndarray:
    """E[p] = alpha / (alpha + beta)."""
    alpha, beta = np.asarray(alpha, dtype=np.float64), np.asarray(beta, dtype=np.float64)
    return alpha / (alpha + beta)


def prob_above(alpha, beta, threshold: float) -> np.ndarray:
    """P(p > threshold) under Beta(alpha, beta), elementwise: the confidence that a prompt's
    success rate exceeds ``threshold``."""
    from scipy.special import betaincc  # imported on first use: the API imports this module at start

    alpha, beta = np.broadcast_arrays(np.asarray(alpha, dtype=np.float64), np.asarray(beta, dtype=np.float64))
    return np.asarray(betaincc(alpha, beta, float(threshold)), dtype=np.float64)  # 1 - I_x(a, b)


# ---------------------------------------------------------------------------- the store


@dataclass(frozen=True)
class Memory:
    """Per-prompt posteriors. ``records[id] = (alpha, beta, clock when last updated, visits)``,
    stored undiscounted: :func:`recall` discounts on read, so a prompt not drawn costs nothing.
    ``visits`` counts the steps the prompt was sampled in (its observed epochs), which (d) needs:
    a posterior alone cannot tell one long failed rescue from failures across epochs."""

    alpha0: float = 1.0
    beta0: float = 1.0
    gamma: float = 1.0
    records: Mapping[str, tuple[float, float, int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Posterior:
    """Per-prompt Beta(alpha, beta) discounted to the current clock; ``seen`` False = prior;
    ``visits`` = steps each prompt was sampled in (None: unknown, read as 0)."""

    alpha: np.ndarray
    beta: np.ndarray
    seen: np.ndarray
    visits: np.ndarray | None = None

    @property
    def visit_counts(self) -> np.ndarray:
        return np.zeros(len(self.seen), dtype=np.int64) if self.visits is None else np.asarray(self.visits, dtype=np.int64)

    @property
    def mean(self) -> np.ndarray:
        return posterior_mean(self.alpha, self.beta)


def recall(memory: Memory, ids: Sequence[str | None], clock: int) -> Posterior:
    """Posteriors of ``ids`` at ``clock`` (a training step), each discounted by gamma^(clock -
    last seen). A None id (a prompt without a stable id) or an unseen one gets the prior."""
    P = len(ids)
    alpha, beta = np.full(P, memory.alpha0), np.full(P, memory.beta0)
    elapsed, seen, visits = np.zeros(P), np.zeros(P, dtype=bool), np.zeros(P, dtype=np.int64)
    for i, key in enumerate(ids):
        rec = memory.records.get(key) if key is not None else None
        if rec is not None:
            alpha[i], beta[i], elapsed[i], seen[i], visits[i] = rec[0], rec[1], clock - rec[2], True, rec[3]
    if (elapsed < 0).any():
        raise ValueError(f"clock {clock} is before a record's last update")
    alpha, beta = discount(alpha, beta, elapsed, memory.gamma, memory.alpha0, memory.beta0)
    return Posterior(alpha=alpha, beta=beta, seen=seen, visits=visits)


def remember(memory: Memory, ids: Sequence[str | None], clock: int, correct, n) -> Memory:
    """A new store after the prompts ``ids`` were sampled at ``clock``: each record is
    discounted to ``clock`` and updated with its (correct, n). Prompts with n = 0 (skipped)
    and None ids keep their old record. A prompt drawn twice in one step (a duplicate id)
    gets both updates, in order."""
    correct, n = np.asarray(correct, dtype=np.int64), np.asarray(n, dtype=np.int64)
    if len(correct) != len(ids) or len(n) != len(ids):
        raise ValueError("ids, correct and n must have one entry per prompt")
    records = dict(memory.records)
    for key, c, m in zip(ids, correct.tolist(), n.tolist()):
        if key is None or m == 0:
            continue
        post = recall(Memory(memory.alpha0, memory.beta0, memory.gamma, records), [key], clock)
        a, b = update(post.alpha, post.beta, [c], [m])
        records[key] = (float(a[0]), float(b[0]), int(clock), int(post.visit_counts[0]) + 1)
    return Memory(memory.alpha0, memory.beta0, memory.gamma, records)


def to_dict(memory: Memory) -> dict:
    """A plain dict (str keys, lists of floats/ints) for the checkpoint; floats round-trip
    exactly through pickle and JSON, so a resumed run plans exactly as before."""
    return {"alpha0": memory.alpha0, "beta0": memory.beta0, "gamma": memory.gamma,
            "records": {k: [a, b, t, v] for k, (a, b, t, v) in memory.records.items()}}


def from_dict(state: Mapping) -> Memory:
    records = {str(k): (float(v[0]), float(v[1]), int(v[2]), int(v[3])) for k, v in state["records"].items()}
    return Memory(float(state["alpha0"]), float(state["beta0"]), float(state["gamma"]), records)


# ---------------------------------------------------------------------------- (a), (b), (c), (d)


def explore_sizes(post: Posterior, n_explore: int, n_min: int, tau: float, conf: float) -> np.ndarray:
    """(a) Exploration rollouts per prompt:

        n_p = n_min       if seen and P(p > tau) > conf      (confidently solved)
              n_explore   otherwise

    The floor n_min >= 1 keeps a confidently solved prompt in view, so a regression shows up
    (at p = 0.5, n_min = 4 rollouts are all correct only 1/16 of the time) and updates the
    posterior. A two-level rule rather than a sliding scale: simple to audit and to ablate."""
    if not 1 <= n_min <= n_explore:
        raise ValueError(f"need 1 <= n_min <= n_explore; got n_min={n_min}, n_explore={n_explore}")
    solved = post.seen & (prob_above(post.alpha, post.beta, tau) > conf)
    return np.where(solved, n_min, n_explore).astype(np.int64)


def known_hard(post: Posterior, hard_mean: float) -> np.ndarray:
    """bool[P]: seen prompts whose posterior mean is below ``hard_mean`` (e.g. Beta(1, 1) after
    0/8 has mean 0.1, after 0/32 about 0.03)."""
    return post.seen & (post.mean < hard_mean)


def preallocate(hard, explore, reserve: int, n_max: int, budget: int) -> np.ndarray:
    """(b) Rescue rollouts reserved up front for known-hard prompts, generated with their
    exploration (one engine call instead of rescue rounds that start from zero):

        r_p = min(reserve, n_max - explore_p)  if hard_p else 0

    taken from the rescue ``budget`` in batch-index order (the last funded share may be
    partial, as AERO's 'prompt-order' split), so sum(r) <= budget."""
    hard, explore = np.asarray(hard, dtype=bool), np.asarray(explore, dtype=np.int64)
    want = np.where(hard, np.clip(n_max - explore, 0, reserve), 0).astype(np.int64)
    before = np.cumsum(want) - want
    return np.clip(max(int(budget), 0) - before, 0, want).astype(np.int64)


def revisit_draws(seed: int, clock: int, ids: Sequence[str | None], salt: str = "revisit") -> np.ndarray:
    """Uniform [0, 1) per prompt from a hash of (salt, seed, clock, id): seeded, with no RNG state
    to checkpoint, and independent of the batch order (a prompt's draw depends on itself only).
    A different ``salt`` gives independent draws, so (c) and (d) revisit independently."""
    words = [hashlib.blake2b(f"{salt}|{seed}|{clock}|{key}".encode(), digest_size=8).digest() for key in ids]
    return np.array([int.from_bytes(w, "little") / 2.0**64 for w in words], dtype=np.float64)


def skip_mask(post: Posterior, tau: float, conf: float, revisit: float, draws) -> np.ndarray:
    """(c) bool[P]: skip seen prompts confidently above ``tau`` (P(p > tau) > conf), unless the
    prompt's draw falls below ``revisit`` (then it is explored with its (a) size). Discounting
    also brings a skipped prompt back: its evidence decays until it is no longer confident."""
    if not 0.0 <= revisit <= 1.0:
        raise ValueError(f"revisit must be in [0, 1]; got {revisit}")
    confident = post.seen & (prob_above(post.alpha, post.beta, tau) > conf)
    return confident & (np.asarray(draws, dtype=np.float64) >= revisit)


def hopeless(post: Posterior, tau: float, conf: float, min_visits: int) -> np.ndarray:
    """bool[P]: prompts confidently hopeless, i.e. sampled in >= ``min_visits`` steps and

        P(p > tau) < 1 - conf

    under the (discounted) posterior. Beta(1, 1) after 0/32 gives P(p > 0.05) = 0.95^33 = 0.18;
    after 0/44 about 0.10. ``min_visits`` asks for failures across epochs, not one long rescue,
    and discounting lets old failures fade, so a prompt the policy may have learned returns."""
    if min_visits < 1:
        raise ValueError(f"min_visits must be >= 1; got {min_visits}")
    doubt = prob_above(post.alpha, post.beta, tau) < 1.0 - conf
    return post.seen & (post.visit_counts >= min_visits) & doubt


def give_up_mask(post: Posterior, tau: float, conf: float, min_visits: int, revisit: float, draws) -> np.ndarray:
    """(d) bool[P]: hopeless prompts (:func:`hopeless`) that get no rescue rounds this step,
    unless the prompt's draw falls below ``revisit`` (then AERO rescues it as usual). A given-up
    prompt is still explored, so a prompt that becomes solvable is seen and its posterior moves."""
    if not 0.0 <= revisit <= 1.0:
        raise ValueError(f"revisit must be in [0, 1]; got {revisit}")
    return hopeless(post, tau, conf, min_visits) & (np.asarray(draws, dtype=np.float64) >= revisit)


# ---------------------------------------------------------------------------- the step plan


@dataclass(frozen=True)
class StepPlan:
    """What a step generates before the rescue rounds.

    Attributes:
        skip: bool[P] prompts not sampled this step (c).
        explore: int[P] exploration rollouts (0 for skipped prompts) (a).
        reserve: int[P] rescue rollouts generated with the exploration (b).
        rescue_budget: rollouts left for the rescue rounds.
        no_rescue: bool[P] prompts given up on this step (d): explored, never rescued.
    """

    skip: np.ndarray
    explore: np.ndarray
    reserve: np.ndarray
    rescue_budget: int
    no_rescue: np.ndarray | None = None

    @property
    def gave_up(self) -> np.ndarray:
        return np.zeros(len(self.skip), dtype=bool) if self.no_rescue is None else self.no_rescue

    @property
    def first_call(self) -> np.ndarray:
        """int[P] rollouts of the exploration call: explore + reserve."""
        return self.explore + self.reserve

    def max_rollouts(self) -> int:
        """The most this step can generate: first call + every rescue rollout."""
        return int(self.first_call.sum()) + int(self.rescue_budget)


class MemorySection(Protocol):
    """What :meth:`MemoryRules.from_config` reads of a run's ``aero_mem`` config section
    (trainer.methods.aero_mem.AEROMemConfig); a protocol, so the core imports no config module."""

    n_explore_min: int
    solved_tau: float
    solved_conf: float
    hard_mean: float
    reserve: int
    skip_tau: float
    skip_conf: float
    revisit: float
    hope_tau: float
    hope_conf: float
    hope_visits: int
    hope_revisit: float
    give_up_floor: bool


@dataclass(frozen=True)
class MemoryRules:
    """Which of the memory's uses (a)-(d) a step plans with, and their thresholds (beyond the
    paper; docs/algorithms.md §7; the ``aero_mem`` config section). Every switch defaults to
    off, and with all four off :func:`plan_step` is AERO's step exactly (Algorithm 1: n_explore
    each, rescue pool (n_total - n_explore) * P; §4.2, Appendix 'Budget Constraints').

    Attributes:
        adapt: (a) explore confidently solved prompts with n_min rollouts (:func:`explore_sizes`).
        n_min: (a) the floor for a confidently solved prompt, 1 <= n_min <= n_explore (also the
            size of a given-up prompt under ``give_up_floor``).
        solved_tau: (a) solved when P(p > solved_tau) > solved_conf under the posterior.
        solved_conf: (a) confidence for 'solved'.
        prealloc: (b) reserve rescue rollouts for known-hard prompts, generated with the
            exploration (:func:`known_hard`, :func:`preallocate`).
        hard_mean: (b) known hard: a seen prompt whose posterior mean is below this.
        reserve: (b) rescue rollouts reserved per known-hard prompt, charged to AERO's pool.
        skip: (c) skip prompts confidently above skip_tau (:func:`skip_mask`).
        skip_tau: (c) skippable when P(p > skip_tau) > skip_conf.
        skip_conf: (c) confidence for skipping.
        revisit: (c) probability that a skippable prompt is sampled anyway.
        give_up: (d) no rescue rounds for confidently hopeless prompts (:func:`give_up_mask`).
        hope_tau: (d) hopeless when P(p > hope_tau) < 1 - hope_conf.
        hope_conf: (d) confidence for 'hopeless'.
        hope_visits: (d) give up only after this many sampled steps (observed epochs).
        hope_revisit: (d) probability that a hopeless prompt is rescued anyway.
        give_up_floor: (d) explore given-up prompts with n_min rollouts.
    """

    adapt: bool = False
    n_min: int = 4
    solved_tau: float = 0.75
    solved_conf: float = 0.8
    prealloc: bool = False
    hard_mean: float = 0.15
    reserve: int = 4
    skip: bool = False
    skip_tau: float = 0.9
    skip_conf: float = 0.9
    revisit: float = 0.2
    give_up: bool = False
    hope_tau: float = 0.05
    hope_conf: float = 0.8
    hope_visits: int = 2
    hope_revisit: float = 0.1
    give_up_floor: bool = False

    @classmethod
    def from_config(cls, aero_mem: MemorySection, switches: tuple[bool, bool, bool, bool],
                    n_explore: int) -> MemoryRules:
        """The rules of a run: its ``aero_mem`` config section, the method's (adapt_explore,
        preallocate, skip, give_up) switches (an ablation forces them) and ``aero.n_explore``,
        which caps the floor: n_min = min(aero_mem.n_explore_min, n_explore)."""
        adapt, prealloc, skip, give_up = switches
        m = aero_mem
        return cls(adapt=adapt, n_min=min(m.n_explore_min, n_explore), solved_tau=m.solved_tau,
                   solved_conf=m.solved_conf, prealloc=prealloc, hard_mean=m.hard_mean, reserve=m.reserve,
                   skip=skip, skip_tau=m.skip_tau, skip_conf=m.skip_conf, revisit=m.revisit, give_up=give_up,
                   hope_tau=m.hope_tau, hope_conf=m.hope_conf, hope_visits=m.hope_visits,
                   hope_revisit=m.hope_revisit, give_up_floor=m.give_up_floor)


def plan_step(post: Posterior, rules: MemoryRules, *, n_total: int, n_explore: int, n_max: int, draws,
              hope_draws=None) -> StepPlan:
    """Combine (a), (b), (c), (d) into one step's plan under the equal budget n_total * P.

        explore_p = explore_sizes(...) if adapt else n_explore; 0 if skipped;
                    n_min if given up and give_up_floor
        gave_up   = give_up_mask(...) & ~skipped                       (d)
        B         = (n_total - n_explore) * (P - sum(gave_up))  (AERO's pool less the given-up
                                                                 prompts' shares; not spent)
        reserve   = preallocate(hard & ~skipped & ~gave_up, ...)  charged to B
        rescue_budget = B - sum(reserve)

    so sum(explore) + sum(reserve) + rescue_budget <= n_explore P + B <= n_total P.
    With adapt, prealloc, skip and give_up all off the plan is AERO's step exactly.

    Args:
        rules: the switches and thresholds of (a)-(d) (:class:`MemoryRules`).
        n_total, n_explore, n_max: AERO's budget per prompt, exploration size and cap (§4.2).
        draws: float[P] uniform draws of (c)'s revisits (:func:`revisit_draws`).
        hope_draws: float[P] draws of (d)'s revisits, with their own salt; needed with give_up."""
    r = rules
    P = len(post.seen)
    explore = (explore_sizes(post, n_explore, r.n_min, r.solved_tau, r.solved_conf) if r.adapt
               else np.full(P, n_explore, dtype=np.int64))
    skipped = skip_mask(post, r.skip_tau, r.skip_conf, r.revisit, draws) if r.skip else np.zeros(P, dtype=bool)
    gave_up = np.zeros(P, dtype=bool)
    if r.give_up:
        if hope_draws is None:
            raise ValueError("give_up needs hope_draws (revisit_draws with its own salt)")
        gave_up = give_up_mask(post, r.hope_tau, r.hope_conf, r.hope_visits, r.hope_revisit, hope_draws) & ~skipped
        if r.give_up_floor:
            explore = np.where(gave_up, np.minimum(explore, r.n_min), explore)
    explore = np.where(skipped, 0, explore).astype(np.int64)
    pool = (n_total - n_explore) * (P - int(gave_up.sum()))
    hard = known_hard(post, r.hard_mean) & ~skipped & ~gave_up if r.prealloc else np.zeros(P, dtype=bool)
    res = preallocate(hard, explore, r.reserve, n_max, pool)
    plan = StepPlan(skip=skipped, explore=explore, reserve=res, rescue_budget=pool - int(res.sum()), no_rescue=gave_up)
    if plan.max_rollouts() > n_total * P:  # the invariant, checked rather than assumed
        raise AssertionError(f"plan exceeds the equal budget: {plan.max_rollouts()} > {n_total * P}")
    return plan
