"""aero-mem: AERO with prompt memory across epochs (beyond the paper; docs/algorithms.md §7).

One step, on top of AERO's own (trainer/methods/aero.py), with the memory math of
trainer.core.memory:

    1. draw the batch; ids = the sampler's stable prompt ids; t = this method's step clock
    2. post = recall(memory, ids, t); plan = plan_step(post, ...)
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

from trainer.methods.aero import _COMMON
from trainer.methods.spec import MethodSpec, register
from trainer.methods.step import StepResult

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from trainer.methods.sampler import Sampler, Samples

STATE_KEY = "aero_mem"
METRICS = ("memory/*",)
# Which of (a) adapt_explore, (b) preallocate, (c) skip, (d) give_up each method uses; None = the config's.
VARIANTS: dict[str, tuple[bool, bool, bool, bool] | None] = {
    "aero-mem": None, "aero-mem-a": (True, False, False, False), "aero-mem-b": (False, True, False, False),
    "aero-mem-c": (False, False, True, False), "aero-mem-d": (False, False, False, True),
    "aero-mem-abd": (True, True, False, True),
}


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


def aero_mem_step(cfg: RunConfig, sampler: Sampler, rng: np.random.Generator) -> StepResult:
    """One aero-mem step (module docstring). ``rng`` is AERO's (S3's random negatives); the
    revisits of (c) are hashed from (seed, clock, id) and need no RNG state."""
    from trainer.core.memory import Memory, from_dict, plan_step, recall, remember, revisit_draws, to_dict
    from trainer.methods.aero import aero_step

    if not (hasattr(sampler, "state") and hasattr(sampler, "prompt_keys")):
        raise NotImplementedError(f"{cfg.method} needs a sampler with prompt ids and state (the embedded engine's)")
    a, m = cfg.aero, cfg.aero_mem
    adapt, prealloc, skip, give_up = options(cfg)
    saved = sampler.state.get(STATE_KEY)
    memory = from_dict(saved["memory"]) if saved else Memory(a.alpha0, a.beta0, m.gamma)
    clock = (saved["clock"] if saved else 0) + 1
    P = sampler.next_prompts()
    ids = sampler.prompt_keys()
    post = recall(memory, ids, clock)
    plan = plan_step(post, n_total=cfg.n_total, n_explore=a.n_explore, n_max=a.n_max, adapt=adapt,
                     n_min=min(m.n_explore_min, a.n_explore), solved_tau=m.solved_tau, solved_conf=m.solved_conf,
                     prealloc=prealloc, hard_mean=m.hard_mean, reserve=m.reserve, skip=skip, skip_tau=m.skip_tau,
                     skip_conf=m.skip_conf, revisit=m.revisit, draws=revisit_draws(cfg.seed, clock, ids),
                     give_up=give_up, hope_tau=m.hope_tau, hope_conf=m.hope_conf, hope_visits=m.hope_visits,
                     hope_revisit=m.hope_revisit, give_up_floor=m.give_up_floor,
                     hope_draws=revisit_draws(cfg.seed, clock, ids, salt="give-up"))
    live = np.flatnonzero(~plan.skip)
    correct, n = np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64)
    if len(live):
        res = aero_step(cfg, _Sampled(sampler, P, live), rng, first=plan.first_call[live],
                        rescue_budget=plan.rescue_budget, no_rescue=plan.gave_up[live])
        correct[live], n[live] = res.ledger["correct"], res.ledger["produced"]
    else:  # every prompt skipped: nothing generated, nothing trained
        empty = np.zeros(0, dtype=np.int64)
        res = StepResult(rows=empty, group=empty.copy(), prompts_used=P, calls=0, generated=0, kinds=[],
                         u_tilde=np.zeros(0))
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


# Reads the aero section too (config_section "aero_mem" implies it); needs the embedded
# engine's sampler (prompt ids and state) and stable prompt ids (checked at config time).
_MEM = dict(_COMMON, family="aero-mem", config_section="aero_mem", metric_keys=_COMMON["metric_keys"] + METRICS,
            engines=("embedded",), needs_prompt_ids=True)

AERO_MEM = register(MethodSpec(
    name="aero-mem", label="AERO-mem", colour="#EECA3B", order=25, strategies=(True, True, True), dash=1,
    description="AERO with prompt memory across epochs (beyond the paper; aero_mem section)", **_MEM,
), aero_mem_step)
AERO_MEM_A = register(MethodSpec(
    name="aero-mem-a", label="AERO-mem (a)", colour="#FF9DA6", order=26, strategies=(True, True, True), dash=3,
    description="aero-mem ablation: (a) memory-sized exploration only", **_MEM,
), aero_mem_step)
AERO_MEM_B = register(MethodSpec(
    name="aero-mem-b", label="AERO-mem (b)", colour="#9D755D", order=27, strategies=(True, True, True), dash=4,
    description="aero-mem ablation: (b) rescue pre-allocated to known-hard prompts only", **_MEM,
), aero_mem_step)
AERO_MEM_C = register(MethodSpec(
    name="aero-mem-c", label="AERO-mem (c)", colour="#BAB0AC", order=28, strategies=(True, True, True), dash=5,
    description="aero-mem ablation: (c) skip confidently solved prompts (with revisits) only", **_MEM,
), aero_mem_step)
AERO_MEM_D = register(MethodSpec(
    name="aero-mem-d", label="AERO-mem (d)", colour="#17BECF", order=29, strategies=(True, True, True), dash=0,
    description="aero-mem ablation: (d) no rescue for confidently hopeless prompts (with revisits) only", **_MEM,
), aero_mem_step)
AERO_MEM_ABD = register(MethodSpec(
    name="aero-mem-abd", label="AERO-mem (a+b+d)", colour="#D67195", order=29, strategies=(True, True, True), dash=1,
    description="aero-mem with (a) + (b) + (d): sized exploration, pre-allocated and capped rescue", **_MEM,
), aero_mem_step)
