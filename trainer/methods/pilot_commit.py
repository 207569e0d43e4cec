"""Pilot-Commit (Kim, Yang, Yan, Liu 2026, "Spend Your Rollouts Where It Counts: Rollout Allocation
for Group-Based RL Post-Training", arXiv 2605.26606; code: github.com/databricks/pilot-commit):
spend a fraction of each prompt's rollouts on a pilot that estimates its reward variance, commit
the rest only to prompts of intermediate pilot accuracy; defer the too-hard ones, evict the solved
ones from every later epoch.

    1. draw a batch; prompts evicted at an earlier visit are skipped, no rollout
    2. pilot    n_pilot = floor(pilot_frac * n_total) rollouts of each other prompt, at most
                floor(left / (n_pilot + q * n_commit)) of them: left = the step's budget not
                yet spent, q = the share of this step's pilots that passed so far (1 before
                the first pilot, so the first batch reserves a whole group per prompt)
    3. classify p_hat = c / n_pilot:  commit  iff p_lower <= p_hat <= 1 - p_upper
                                      too easy   p_hat > 1 - p_upper (skipped)
                                      too hard   p_hat < p_lower     (deferred to a later epoch)
                evict once p_hat >= p_solve (all pilot rollouts correct at p_solve = 1) on
                consecutive visits adding up to ``evict_after`` pilot rollouts
    4. commit   n_commit = n_total - n_pilot more rollouts of each committed prompt, as many
                as the budget holds, the largest pilot reward variance p_hat (1 - p_hat) first
    5. repeat 1-4 with further batches (at most ``max_batches``) while a group still fits in
       the budget n_total * batch_prompts (GRPO's), then train every rollout of the committed
       prompts (pilot + commit, n_total per group) with GRPO advantages over the whole group;
       the other prompts' pilot rollouts are not trained

The evicted and deferred prompts live in ``sampler.state`` by prompt id (``prompt_keys``), so
they persist across epochs and checkpoints on both engines.

Departures (docs/algorithms.md "Pilot-Commit"): the paper's code commits a survivor from a replay
buffer in a later round or step (up to 4 steps off-policy) and pilots three training batches
per round; here pilot and commit happen in the same step, on-policy, and a step's rollouts never
exceed GRPO's n_total * batch_prompts, so it trains fewer groups than GRPO (the paper compares on
cumulative rollouts, paying the pilots on top of full training batches). Our pilots are small
(n_total / 4 = 4 at n_total = 16, against the paper's 16 or 32), so one all-correct pilot is weak
evidence: eviction waits for ``evict_after`` (16) all-correct pilot rollouts over consecutive visits.
"""

from __future__ import annotations

import math
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

STATE_KEY = "pilot_commit"
COMMIT, TOO_EASY, TOO_HARD = 0, 1, 2  # the pilot's verdict on a prompt
EPS = 1e-9  # float slack of the threshold comparisons (c / n_pilot against p_lower, 1 - p_upper, p_solve)


class PilotCommitConfig(Strict):
    """Pilot-Commit (arXiv 2605.26606; databricks/pilot-commit recipe/pc) at GRPO's budget
    n_total * batch_prompts per step. Needs stable prompt ids (train_size on the arithmetic task)."""

    pilot_frac: float = Field(0.25, gt=0.0, lt=1.0, description="Pilot share of n_total: n_pilot = floor(pilot_frac * "
                              "n_total) rollouts per prompt, the rest (n_commit) for committed prompts (authors' scripts: "
                              "32 + 96 of n = 128, 16 + 48 of n = 64). n_pilot must be >= 2 and < n_total.")
    p_lower: float = Field(0.125, ge=0.0, le=1.0, description="Too hard below: a prompt with pilot accuracy < p_lower "
                           "is deferred to a later epoch (authors' scripts: 0.125).")
    p_upper: float = Field(0.25, ge=0.0, le=1.0, description="Too easy above 1 - p_upper: a prompt with pilot accuracy "
                           "> 1 - p_upper is skipped (authors' scripts: 0.25, i.e. commit up to 0.75).")
    p_solve: float = Field(1.0, gt=0.0, le=1.0, description="Evict at or above: a prompt with pilot accuracy >= p_solve "
                           "is never sampled again (authors' scripts: 1.0, every pilot rollout correct).")
    evict: bool = Field(True, description="Evict solved prompts (p_solve) from every later epoch; off: they come back.")
    evict_after: int = Field(16, ge=0, le=4096, description="Pilot rollouts at or above p_solve, over a prompt's "
                             "consecutive visits (one per epoch), before it is evicted: 16 is the evidence of the authors' "
                             "smaller pilot (16 of n = 64); 0 (or <= n_pilot): one pilot, their rule as written.")
    max_batches: int = Field(3, ge=1, le=16, description="Prompt batches a step may pilot while budget is left (authors' "
                             "scripts: pilot 3 x the training batch per round). Rollouts never exceed "
                             "n_total * batch_prompts.")


def pilot_size(n_total: int, pilot_frac: float) -> int:
    """n_pilot = floor(pilot_frac * n_total), the pilot rollouts per prompt (the paper's pilot
    "fraction of the rollout budget", abstract; the authors' scripts: n_pilot = n / 4)."""
    return math.floor(pilot_frac * n_total + EPS)


def pilot_commit_rules(cfg: RunConfig) -> Issues:
    pc, n = cfg.pilot_commit, cfg.n_total
    n_p = pilot_size(n, pc.pilot_frac)
    if n < 3:
        return [("n_total", f"must be >= 3 for pilot-commit: 2 pilot rollouts and at least 1 commit; got {n}")]
    if not 2 <= n_p < n:
        return [("pilot_commit.pilot_frac", f"gives n_pilot = {n_p} of n_total = {n}: must give 2 <= n_pilot < n_total "
                 f"(pilot_frac from {2 / n:g} to below 1)")]
    if pc.p_lower > 1.0 - pc.p_upper + EPS:
        return [("pilot_commit.p_lower", f"must be <= 1 - pilot_commit.p_upper ({1.0 - pc.p_upper:g}): "
                 "the commit band is empty")]
    if not (pilot_verdict(np.arange(n_p + 1) / n_p, pc.p_lower, pc.p_upper) == COMMIT).any():
        return [("pilot_commit.p_lower", f"no pilot accuracy c / {n_p} lies in [p_lower, 1 - p_upper] = "
                 f"[{pc.p_lower:g}, {1.0 - pc.p_upper:g}]: nothing would ever be committed")]
    return []


PILOT_COMMIT_SECTION = Section(
    name="pilot_commit", model=PilotCommitConfig, title="Pilot-Commit (pilot, then commit)", rules=pilot_commit_rules,
    form=(("train_size", "train_size (finite set; 0 = stream)"), ("pilot_commit.pilot_frac", "pilot share of n_total"),
          ("pilot_commit.p_lower", "p_lower (too hard below)"), ("pilot_commit.p_upper", "p_upper (too easy above 1 - p_upper)"),
          ("pilot_commit.p_solve", "p_solve (evict at or above)"), ("pilot_commit.evict", "evict solved prompts"),
          ("pilot_commit.evict_after", "evict after (pilot rollouts)"),
          ("pilot_commit.max_batches", "batches per step")),
)


def pilot_accuracy(correct: np.ndarray, n_pilot: int) -> np.ndarray:
    """p_hat = c / n_pilot, each prompt's pilot success rate; its Bernoulli reward variance
    p_hat (1 - p_hat) is the informativeness the pilot estimates (abstract: group-based updates
    are most effective at high reward variance; overview figure: "empirical reward variance")."""
    return np.asarray(correct, dtype=float) / n_pilot


def pilot_verdict(p_hat: np.ndarray, p_lower: float, p_upper: float) -> np.ndarray:
    """int[P]: COMMIT iff p_lower <= p_hat <= 1 - p_upper; TOO_EASY above, TOO_HARD below (the
    code's ``filter_batch``: diversity_threshold_lower / _upper; overview figure: "too hard ...
    deferred")."""
    p = np.asarray(p_hat, dtype=float)
    return np.where(p > 1.0 - p_upper + EPS, TOO_EASY, np.where(p < p_lower - EPS, TOO_HARD, COMMIT)).astype(np.int64)


def evicts(p_hat: np.ndarray, p_solve: float) -> np.ndarray:
    """bool[P]: p_hat >= p_solve, the prompts removed from every later epoch (overview figure:
    "too easy ... evicted from future sampling"; the code's ``exclude_batch``, exclude_threshold_upper)."""
    return np.asarray(p_hat, dtype=float) >= p_solve - EPS


def solved_streak(prev: int, p_hat: float, n_pilot: int, p_solve: float) -> int:
    """Pilot rollouts of a prompt's consecutive visits at or above p_solve, this one included: prev
    + n_pilot if this pilot reaches p_solve, else 0. A prompt is evicted once the streak reaches
    ``evict_after`` (the evidence the authors' single pilot of 16 or 32 rollouts gives)."""
    return prev + n_pilot if bool(evicts(np.array([p_hat]), p_solve)[0]) else 0


def reward_variance(p_hat: np.ndarray) -> np.ndarray:
    """p_hat (1 - p_hat), a binary reward's variance at pilot accuracy p_hat: the informativeness
    the pilot estimates (largest at 0.5)."""
    p = np.asarray(p_hat, dtype=float)
    return p * (1.0 - p)


def pilot_quota(left: int, n_pilot: int, n_commit: int, pass_share: float) -> int:
    """Prompts the step may still pilot with the budget ``left``: each costs its pilot and, in
    expectation, ``pass_share`` of a commit, floor(left / (n_pilot + q n_commit)); and one commit
    must still fit after the pilots, floor((left - n_commit) / n_pilot). With q = 1 (no pilot seen
    yet) each reserves a whole group, so the first batch pilots GRPO's P prompts."""
    expected = math.floor(left / (n_pilot + pass_share * n_commit) + EPS)
    return max(0, min(expected, (left - n_commit) // n_pilot))


def commit_order(p_hat: np.ndarray, passed: np.ndarray, k: int) -> np.ndarray:
    """bool[P]: the (at most) k passed prompts committed, the largest pilot reward variance first,
    ties in batch order (the replay-buffer selection ``max_variance`` of the code's 1.5B script)."""
    idx = np.flatnonzero(passed)
    order = idx[np.argsort(-reward_variance(np.asarray(p_hat)[idx]), kind="stable")]
    out = np.zeros(len(passed), dtype=bool)
    out[order[:max(0, k)]] = True
    return out


def remember(memory: dict[str, dict], pc: PilotCommitConfig, keys: list, verdict: np.ndarray, committed: np.ndarray,
             p_hat: np.ndarray, n_pilot: int, clock: int) -> tuple[int, int]:
    """Update the deferred, evicted and solved-streak records (``memory``, by prompt id) after a
    pilot: a piloted prompt leaves the deferred set and re-enters it if too hard again (it comes
    back at its next visit, a later epoch); its solved streak grows or resets (:func:`solved_streak`),
    and at ``evict_after`` the prompt is evicted for good. ``verdict`` is -1 for prompts not
    piloted; ``committed`` the passed prompts the budget committed. Returns (previously deferred
    prompts committed now, prompts newly evicted)."""
    recovered = newly = 0
    deferred, evicted, streak = memory["deferred"], memory["evicted"], memory["streak"]
    for key, v, done, p in zip(keys, verdict.tolist(), committed.tolist(), p_hat.tolist()):
        if key is None or v < 0:
            continue
        recovered += int(done and key in deferred)
        deferred.pop(key, None)
        if v == TOO_HARD:
            deferred[key] = clock
        run = solved_streak(streak.pop(key, 0), p, n_pilot, pc.p_solve) if pc.evict else 0
        if run and run >= pc.evict_after and key not in evicted:
            evicted[key] = clock
            newly += 1
        elif run:
            streak[key] = run
    return recovered, newly


def pilot_commit_step(cfg: RunConfig, sampler: Sampler, rng: np.random.Generator | None = None, *, spec: MethodSpec) -> StepResult:
    """One Pilot-Commit step (module docstring); evicted and deferred prompts live in ``sampler.state``."""
    pc, n = cfg.pilot_commit, cfg.n_total
    n_p = pilot_size(n, pc.pilot_frac)
    saved = sampler.state.get(STATE_KEY) or {"clock": 0, "evicted": {}, "deferred": {}, "streak": {}}
    clock = saved["clock"] + 1
    memory = {name: dict(saved.get(name, {})) for name in ("evicted", "deferred", "streak")}
    evicted = memory["evicted"]
    budget = left = n * cfg.batch_prompts
    count = dict.fromkeys(("batches", "too_easy", "deferred", "recovered", "evicted", "evicted_skipped", "unpiloted",
                           "uncommitted"), 0)
    used = calls = passed_so_far = 0
    rows: list[np.ndarray] = []
    groups: list[np.ndarray] = []
    pilot_c: list[np.ndarray] = []
    final_c: list[np.ndarray] = []
    reward: dict[int, float] = {}  # by global row id
    while count["batches"] < pc.max_batches:
        seen = sum(len(c) for c in pilot_c)
        room = pilot_quota(left, n_p, n - n_p, passed_so_far / seen if seen else 1.0)
        if room < 1:
            break
        Pb, keys = sampler.next_prompts(), sampler.prompt_keys()
        used, count["batches"] = used + Pb, count["batches"] + 1
        open_ = np.array([k is None or k not in evicted for k in keys], dtype=bool)
        quota = min(room, int(open_.sum()))
        piloted = open_ & (np.cumsum(open_) <= quota)
        count["evicted_skipped"] += int((~open_).sum())
        count["unpiloted"] += int(open_.sum()) - quota
        if not piloted.any():
            continue
        pilot = sampler.sample(np.where(piloted, n_p, 0).tolist(), round_=calls)
        calls, left = calls + 1, left - len(pilot)
        reward.update(zip(pilot.ids.tolist(), pilot.reward.tolist()))
        c = pilot.correct_by_prompt(Pb)
        p_hat = pilot_accuracy(c, n_p)
        verdict = np.where(piloted, pilot_verdict(p_hat, pc.p_lower, pc.p_upper), -1)
        commit = commit_order(p_hat, verdict == COMMIT, left // (n - n_p))
        passed_so_far += int((verdict == COMMIT).sum())
        count["uncommitted"] += int((verdict == COMMIT).sum() - commit.sum())
        count["too_easy"] += int((verdict == TOO_EASY).sum())
        count["deferred"] += int((verdict == TOO_HARD).sum())
        recovered, newly = remember(memory, pc, keys, verdict, commit, p_hat, n_p, clock)
        count["recovered"], count["evicted"] = count["recovered"] + recovered, count["evicted"] + newly
        rows_of, total = pilot.rows_by_prompt(Pb), c.copy()
        if commit.any():
            more = sampler.sample(np.where(commit, n - n_p, 0).tolist(), round_=calls)
            calls, left = calls + 1, left - len(more)
            reward.update(zip(more.ids.tolist(), more.reward.tolist()))
            total += more.correct_by_prompt(Pb)
            rows_of = [np.concatenate([a, b]) for a, b in zip(rows_of, more.rows_by_prompt(Pb))]
        for i in np.flatnonzero(commit).tolist():
            rows.append(rows_of[i])
            groups.append(np.full(len(rows_of[i]), used - Pb + i, dtype=np.int64))  # unique across batches
        pilot_c.append(c[piloted])
        final_c.append(total[piloted])
    sampler.state[STATE_KEY] = {"clock": clock, **memory}
    piloted_c = np.concatenate(pilot_c) if pilot_c else np.zeros(0, dtype=np.int64)
    stats = {"pilot_commit/piloted": float(len(piloted_c)), "pilot_commit/pilot_rollouts": float(n_p * len(piloted_c)),
             "pilot_commit/committed": float(len(rows)), "pilot_commit/evicted_total": float(len(evicted)),
             "pilot_commit/unspent": float(left), **{f"pilot_commit/{k}": float(v) for k, v in count.items()}}
    if not len(piloted_c):  # every drawn prompt evicted: nothing piloted
        return StepResult.nothing_trained(used, {mk.ZERO_ACC_AFTER_EXPLORE: 0.0, mk.ZERO_ACC_AFTER_RESCUE: 0.0, **stats})
    stats.update(strata_stats(piloted_c, n_p))
    stats[mk.ZERO_ACC_AFTER_RESCUE] = float((np.concatenate(final_c) == 0).mean())
    row = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    group = np.unique(np.concatenate(groups), return_inverse=True)[1].astype(np.int64) if rows else row.copy()
    r = np.array([reward[i] for i in row.tolist()], dtype=np.float64)
    return StepResult(rows=row, group=group, advantages=group_advantages(spec, cfg, r, group), prompts_used=used,
                      calls=calls, generated=budget - left, stats=stats)


def _pilot_n(cfg: RunConfig) -> int:
    return pilot_size(cfg.n_total, cfg.pilot_commit.pilot_frac)


def _batches(cfg: RunConfig) -> int:
    return cfg.pilot_commit.max_batches


PILOT_COMMIT = register(MethodSpec(
    name="pilot-commit", family="pilot-commit", sections=(PILOT_COMMIT_SECTION,),
    # evicted / deferred prompts live in the sampler's state (checkpointed by both engines), keyed by stable prompt ids;
    # verl's rollout.n is the pilot size, and a step may draw max_batches prompt batches
    needs=Needs(engines=BOTH_ENGINES, prompt_ids=True), verl=VerlMapping(first_call_n=_pilot_n, prompt_batches=_batches),
    display=Display("Pilot-Commit", "#7570B3", "Pilot-Commit (pilot a share of each prompt's rollouts, commit the rest to "
                    "prompts of intermediate pilot accuracy, evict solved ones; pilot_commit section)", order=70, dash=1),
), pilot_commit_step)
