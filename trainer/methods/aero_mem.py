"""aero-mem: AERO with prompt memory across epochs (beyond the paper; docs/algorithms.md §7).

One step, on top of AERO's own (trainer/methods/aero.py), with the memory math of
trainer.core.memory:

    1. draw the batch; ids = the sampler's stable prompt ids; t = this method's step clock
    2. post = recall(memory, ids, t); plan = plan_step(post, MemoryRules.from_config(...), ...)
           (a) exploration size per prompt, (b) rescue rollouts reserved for known-hard
           prompts, (c) prompts skipped, (d) hopeless prompts given no rescue; never more
           than n_total * P rollouts
    3. AERO's step on the sampled prompts, with the plan's first-call sizes, rescue budget and
       given-up prompts
    4. memory = remember(memory, ids, t, correct, n) over the rollouts AERO used

The memory and its clock live in the sampler's ``state`` (the adapter keeps it across steps
and writes it into the checkpoint, so a resumed run plans exactly as before).
The ablations aero-mem-a, -b, -c, -d switch on exactly one of (a), (b), (c), (d); aero-mem-abd
is (a) + (b) + (d); aero-mem takes all four switches from the ``aero_mem`` config section.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

import numpy as np

from trainer.spec.config_types import Field, Strict
from trainer.methods.aero import AERO_SECTION, AERO_VERL
from trainer.methods.aero_strategies import ALL
from trainer.methods.section import Section
from trainer.methods.spec import BOTH_ENGINES, Display, MethodSpec, Needs, register
from trainer.methods.step import StepResult

if TYPE_CHECKING:
    from trainer.spec.config import RunConfig
    from trainer.methods.sampler import Sampler, Samples

STATE_KEY = "aero_mem"
# Which of (a) adapt_explore, (b) preallocate, (c) skip, (d) give_up each method uses; None = the config's.
VARIANTS: dict[str, tuple[bool, bool, bool, bool] | None] = {
    "aero-mem": None, "aero-mem-a": (True, False, False, False), "aero-mem-b": (False, True, False, False),
    "aero-mem-c": (False, False, True, False), "aero-mem-d": (False, False, False, True),
    "aero-mem-abd": (True, True, False, True),
}


class AEROMemConfig(Strict):
    """aero-mem: AERO with a per-prompt Beta posterior carried across epochs (beyond the paper;
    docs/algorithms.md §7). Needs stable prompt ids: the math and code tasks, or the arithmetic
    task with ``train_size``. Exploration savings are not spent: a step never generates more
    than AERO's n_total * P."""

    gamma: float = Field(0.98, ge=0.0, le=1.0, description="Forgetting per training step since a prompt was last "
                         "seen, applied to its evidence (alpha - alpha0, beta - beta0): 1 = never forget, 0 = AERO's "
                         "from-scratch view. The prior is aero.alpha0 / aero.beta0.")
    adapt_explore: bool = Field(True, description="(a) Explore confidently solved prompts with n_explore_min rollouts "
                                "instead of aero.n_explore.")
    n_explore_min: int = Field(4, ge=1, le=4096, description="(a) The floor: rollouts for a confidently solved prompt, so a "
                               "regression is still seen (capped at aero.n_explore).")
    solved_tau: float = Field(0.75, gt=0.0, lt=1.0, description="(a) A prompt is confidently solved when "
                              "P(p > solved_tau) > solved_conf under its posterior.")
    solved_conf: float = Field(0.8, gt=0.0, lt=1.0, description="(a) Confidence for 'solved' (see solved_tau).")
    preallocate: bool = Field(True, description="(b) Reserve rescue rollouts for known-hard prompts and generate them "
                              "with the exploration, so their rescue does not start from zero.")
    hard_mean: float = Field(0.15, gt=0.0, lt=1.0, description="(b) Known hard: a seen prompt whose posterior mean is "
                             "below this (Beta(1, 1) after 0/8: 0.1).")
    reserve: int = Field(4, ge=1, le=4096, description="(b) Rescue rollouts reserved per known-hard prompt, charged to AERO's "
                         "rescue budget (n_total - n_explore) * P; capped at aero.n_max.")
    skip: bool = Field(False, description="(c) Skip prompts confidently all-correct (no rollouts this step), each "
                       "revisited with probability 'revisit'.")
    skip_tau: float = Field(0.9, gt=0.0, lt=1.0, description="(c) Skip when P(p > skip_tau) > skip_conf.")
    skip_conf: float = Field(0.9, gt=0.0, lt=1.0, description="(c) Confidence for skipping (see skip_tau).")
    revisit: float = Field(0.2, ge=0.0, le=1.0, description="(c) Probability that a skippable prompt is sampled "
                           "anyway (seeded by run seed, step and prompt id).")
    give_up: bool = Field(False, description="(d) No rescue rounds for prompts confidently hopeless (still explored), "
                          "each rescued anyway with probability hope_revisit; their rescue share is not spent.")
    hope_tau: float = Field(0.05, gt=0.0, lt=1.0, description="(d) Hopeless when P(p > hope_tau) < 1 - hope_conf "
                            "under the prompt's posterior (Beta(1, 1) after 0/32: 0.18 at 0.05).")
    hope_conf: float = Field(0.8, gt=0.0, lt=1.0, description="(d) Confidence for 'hopeless' (see hope_tau).")
    hope_visits: int = Field(2, ge=1, le=1_000_000, description="(d) Give up only after the prompt was sampled in at least this "
                             "many steps (observed epochs), so one failed rescue is not enough.")
    hope_revisit: float = Field(0.1, ge=0.0, le=1.0, description="(d) Probability that a hopeless prompt is rescued "
                                "anyway (seeded by run seed, step and prompt id, independent of (c)'s draws).")
    give_up_floor: bool = Field(False, description="(d) Explore given-up prompts with n_explore_min rollouts instead "
                                "of their usual exploration size.")


AERO_MEM_SECTION = Section(
    name="aero_mem", model=AEROMemConfig, title="AERO-mem (prompt memory, beyond the paper)",
    form=(("train_size", "train_size (finite set; 0 = stream)"), ("aero_mem.gamma", "gamma (forgetting per step)"),
          ("aero_mem.adapt_explore", "(a) adapt exploration"), ("aero_mem.n_explore_min", "(a) n_explore_min"),
          ("aero_mem.preallocate", "(b) pre-allocate rescue"), ("aero_mem.reserve", "(b) reserve"),
          ("aero_mem.skip", "(c) skip solved"), ("aero_mem.revisit", "(c) revisit"),
          ("aero_mem.give_up", "(d) give up on hopeless"), ("aero_mem.hope_tau", "(d) hope_tau"),
          ("aero_mem.hope_visits", "(d) hope_visits"), ("aero_mem.hope_revisit", "(d) hope_revisit")),
)


def options(cfg: RunConfig) -> tuple[bool, bool, bool, bool]:
    """(adapt_explore, preallocate, skip, give_up) of ``cfg.method``."""
    forced = VARIANTS[cfg.method]
    m = cfg.aero_mem
    return forced if forced is not None else (m.adapt_explore, m.preallocate, m.skip, m.give_up)


class _Sampled:
    """The batch already drawn, seen through the prompts the plan samples (``live``, indices
    into the batch): AERO's step runs on them as if they were the whole batch. Row ids stay
    the adapter's global ids; prompt indices are positions in ``live``."""

    def __init__(self, sampler: Sampler, P: int, live: np.ndarray):
        self.sampler, self.P, self.live = sampler, P, live
        self.position = np.full(P, -1, dtype=np.int64)
        self.position[live] = np.arange(len(live))

    def next_prompts(self) -> int:
        return len(self.live)

    def sample(self, counts: Sequence[int], round_: int) -> Samples:
        full = np.zeros(self.P, dtype=np.int64)
        full[self.live] = np.asarray(counts, dtype=np.int64)
        s = self.sampler.sample(full.tolist(), round_)
        return replace(s, prompt_of_row=self.position[s.prompt_of_row])

    def stream(self, first: Sequence[int], react) -> list[Samples]:
        full = np.zeros(self.P, dtype=np.int64)
        full[self.live] = np.asarray(first, dtype=np.int64)

        def seen_here(block: Samples, round_: int):
            asks = react(replace(block, prompt_of_row=self.position[block.prompt_of_row]), round_)
            return [(int(self.live[p]), n, r) for p, n, r in asks]

        return [replace(s, prompt_of_row=self.position[s.prompt_of_row])
                for s in self.sampler.stream(full.tolist(), seen_here)]


def aero_mem_step(cfg: RunConfig, sampler: Sampler, rng: np.random.Generator, *, spec: MethodSpec) -> StepResult:
    """One aero-mem step (module docstring). ``rng`` is AERO's (S3's random negatives); the
    revisits of (c) are hashed from (seed, clock, id) and need no RNG state."""
    from trainer.core.memory import (
        Memory, MemoryRules, from_dict, plan_step, recall, remember, revisit_draws, to_dict,
    )
    from trainer.methods.aero import aero_step_with_ledger

    if not (hasattr(sampler, "state") and hasattr(sampler, "prompt_keys")):
        raise NotImplementedError(f"{cfg.method} needs a sampler with prompt ids and state (both engines' samplers have them)")
    a, m = cfg.aero, cfg.aero_mem
    saved = sampler.state.get(STATE_KEY)
    memory = from_dict(saved["memory"]) if saved else Memory(a.alpha0, a.beta0, m.gamma)
    clock = (saved["clock"] if saved else 0) + 1
    P = sampler.next_prompts()
    ids = sampler.prompt_keys()
    post = recall(memory, ids, clock)
    rules = MemoryRules.from_config(m, options(cfg), a.n_explore)
    plan = plan_step(post, rules, n_total=cfg.n_total, n_explore=a.n_explore, n_max=a.n_max,
                     draws=revisit_draws(cfg.seed, clock, ids),
                     hope_draws=revisit_draws(cfg.seed, clock, ids, salt="give-up"))
    live = np.flatnonzero(~plan.skip)
    correct, n = np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64)
    if len(live):
        res, ledger = aero_step_with_ledger(cfg, _Sampled(sampler, P, live), rng, spec=spec, first=plan.first_call[live],
                                            rescue_budget=plan.rescue_budget, no_rescue=plan.gave_up[live])
        correct[live], n[live] = ledger["correct"], ledger["produced"]
    else:  # every prompt skipped: nothing generated, nothing trained
        res = StepResult.nothing_trained(P)
    memory = remember(memory, ids, clock, correct, n)
    sampler.state[STATE_KEY] = {"clock": clock, "memory": to_dict(memory)}
    res.prompts_used = P
    res.stats.update(memory_stats(plan, post.seen, a.n_explore, len(memory.records)))
    return res


def memory_stats(plan, seen: np.ndarray, n_explore: int, size: int) -> dict[str, float]:
    """memory/* metrics of one step (docs/algorithms.md §7)."""
    sampled = ~plan.skip
    return {
        "memory/known": float(seen.sum()), "memory/size": float(size), "memory/skipped": float(plan.skip.sum()),
        "memory/explore_small": float((sampled & (plan.explore < n_explore)).sum()),
        "memory/explore_saved": float(n_explore * len(seen) - plan.explore.sum()),
        "memory/preallocated": float(plan.reserve.sum()), "memory/hard": float((plan.reserve > 0).sum()),
        "memory/rescue_budget": float(plan.rescue_budget), "memory/gave_up": float(plan.gave_up.sum()),
    }


# AERO's section and verl mapping plus the memory's; a sampler with prompt ids and state (both
# engines' have them) and stable prompt ids (checked at config time).
_NEEDS = Needs(engines=BOTH_ENGINES, prompt_ids=True, streams=True)  # AERO's step: rollout.schedule applies


def _mem(name: str, label: str, colour: str, order: int, dash: int, description: str) -> MethodSpec:
    return register(MethodSpec(name=name, family="aero-mem", sections=(AERO_SECTION, AERO_MEM_SECTION),
                               aero=ALL, verl=AERO_VERL, needs=_NEEDS,
                               display=Display(label, colour, description, order, dash)), aero_mem_step)


AERO_MEM = _mem("aero-mem", "AERO-mem", "#EECA3B", 25, 1,
                "AERO with prompt memory across epochs (beyond the paper; aero_mem section)")
AERO_MEM_A = _mem("aero-mem-a", "AERO-mem (a)", "#FF9DA6", 26, 3, "aero-mem ablation: (a) memory-sized exploration only")
AERO_MEM_B = _mem("aero-mem-b", "AERO-mem (b)", "#9D755D", 27, 4,
                  "aero-mem ablation: (b) rescue pre-allocated to known-hard prompts only")
AERO_MEM_C = _mem("aero-mem-c", "AERO-mem (c)", "#BAB0AC", 28, 5,
                  "aero-mem ablation: (c) skip confidently solved prompts (with revisits) only")
AERO_MEM_D = _mem("aero-mem-d", "AERO-mem (d)", "#17BECF", 29, 0,
                  "aero-mem ablation: (d) no rescue for confidently hopeless prompts (with revisits) only")
AERO_MEM_ABD = _mem("aero-mem-abd", "AERO-mem (a+b+d)", "#D67195", 29, 1,
                    "aero-mem with (a) + (b) + (d): sized exploration, pre-allocated and capped rescue")
