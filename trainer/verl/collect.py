"""One step's rollouts on verl: the verl adapter for the method steps (trainer/methods/), on
DataProto batches. trainer/embedded/collect.py is the embedded engine's.

The order of a method's steps is its step function's (trainer/methods/aero.py,
trainer/methods/dapo.py); this module only generates and picks rows. ``generate`` is the
rollout call (the trainer passes its AgentLoopManager's ``generate_sequences``); every call
here happens before the trainer puts the rollout replicas to sleep.

Row bookkeeping: every generated row gets a global id in generation order (explore rows
first, then each rescue call's rows, or DAPO's prompt batches in order); a step names the
rows to train on by id, so ``curate`` sees exactly what the embedded collector sees, and the
selected ids pick the training rows from the concatenated generated batch.

Advantages are the step's own (``StepResult.advantages``, the same values the embedded engine
trains on: AERO's Bayesian baseline, DAPO's shaped rewards, the group std with or without
Bessel's correction), carried to the update in the batch's ``ADV_COLUMN``: one generic
"precomputed advantages" path, whatever the method; verl's advantage estimators are not used
on it (trainer/verl/trainer.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from trainer.spec.config import RunConfig
from trainer.methods.sampler import Samples
from trainer.methods.spec import get_step
from trainer.methods.step import CostMetrics
from trainer.verl.rows import ADV_COLUMN, GenCount, generate_rows, response_lengths, row_correct, row_reward


@dataclass
class VerlCollected:
    """A step's training rows (no padding yet) and its accounting.

    generated: every generated row (real requests), in generation order (None when the step made
    no engine call); train: the rows to train on (None when a step keeps none), each with its
    advantage in ``ADV_COLUMN``;
    advantages: float32[M] the same values; stats: platform metrics (strata, rescue, groups,
    dapo/*); cost_metrics: the step's metrics that need its cost per trained token (AERO's
    savings), or None."""

    train: object
    generated: object
    prompts_used: int
    gen: GenCount
    advantages: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    stats: dict[str, float] = field(default_factory=dict)
    cost_metrics: CostMetrics | None = None
    # per generated row: its prompt group and generation round; the training rows' global ids
    # (what the step's stored rollout sample needs: trainer/verl/step_detail.py)
    groups: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    rounds: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    train_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def _union(batch, prompt_of_row: np.ndarray, out):
    """The prompt-side columns of ``batch`` repeated per generated row, joined with the outputs."""
    return batch.select_idxs(np.asarray(prompt_of_row, dtype=np.int64)).union(out)


class VerlSampler:
    """The Sampler of one step over verl's rollout (trainer.methods.sampler).

    ``next_batch()`` -> (batch, gen_batch) is the next prompt batch as verl's ``_get_gen_batch``
    splits it (``batch`` keeps the reward columns and uid); a call generates
    ``counts[p]`` rows of prompt p, prompt-major, padded to ``divisor`` (trainer/verl/rows.py).
    Correctness is the verifier's accuracy (``row_correct``), the reward the possibly shaped
    rm_scores. ``state`` is the method's plain-data state across steps, which the trainer keeps
    and checkpoints (the embedded engine's ``TrainingState.method_state``); ``prompt_keys`` are
    the rows' ``extra_info.where`` (trainer/verl/data.py), the embedded task's own ids."""

    def __init__(self, next_batch: Callable, generate: Callable, divisor: int, state: dict | None = None):
        self.next_batch, self.generate, self.divisor = next_batch, generate, divisor
        self.state = state if state is not None else {}
        self.count, self.chunks, self.n_rows = GenCount(), [], 0
        self.call_s: list[float] = []  # seconds of each generate call
        self.batch = self.gen_batch = None
        self.drawn = 0  # prompts drawn this step (a row's group is its prompt's index among them)
        self.groups: list[np.ndarray] = []
        self.rounds: list[np.ndarray] = []

    def next_prompts(self) -> int:
        self.batch, self.gen_batch = self.next_batch()
        self.drawn += len(self.batch)
        return len(self.batch)

    def prompt_keys(self) -> list[str | None]:
        infos = self.batch.non_tensor_batch.get("extra_info")
        if infos is None:
            return [None] * len(self.batch)
        return [None if not isinstance(i, dict) or i.get("where") is None else str(i["where"]) for i in infos]

    def sample(self, counts: Sequence[int], round_: int) -> Samples:
        idx = np.repeat(np.arange(len(self.batch)), np.asarray(counts, dtype=np.int64))
        t0 = time.perf_counter()
        out = _union(self.batch, idx, generate_rows(self.generate, self.gen_batch, idx, self.divisor, self.count))
        self.call_s.append(time.perf_counter() - t0)
        self.chunks.append(out)
        self.groups.append(self.drawn - len(self.batch) + idx)
        self.rounds.append(np.full(len(idx), round_, dtype=np.int64))
        s = Samples.build(self.n_rows, idx, row_reward(out), response_lengths(out),
                          out.batch["attention_mask"].sum(-1).float().cpu().numpy(), correct=row_correct(out))
        self.n_rows += len(idx)
        return s

    def generated(self):
        """Every generated row of the step, or None when the step made no engine call (a
        method that skipped every drawn prompt: Pilot-Commit's evicted, GRESO's skipped)."""
        from verl import DataProto

        if not self.chunks:
            return None
        return DataProto.concat(self.chunks) if len(self.chunks) > 1 else self.chunks[0]


def collect(cfg: RunConfig, next_batch: Callable, generate: Callable, divisor: int,
            rng: np.random.Generator | None = None, state: dict | None = None) -> VerlCollected:
    """One step of ``cfg.method`` (its registered step) on verl; the training rows carry their
    advantages (module docstring). ``state``: the method's state across steps, updated in place."""
    import torch

    sampler = VerlSampler(next_batch, generate, divisor, state)
    res = get_step(cfg.method)(cfg, sampler, rng)
    generated = sampler.generated()
    adv = torch.from_numpy(res.advantages).to(torch.float32)
    stats = {**res.stats, "time/first_call_s": sampler.call_s[0] if sampler.call_s else 0.0,  # as the embedded
             "time/more_calls_s": float(sum(sampler.call_s[1:]))}  # adapter splits generation
    train = generated.select_idxs(res.rows) if len(res.rows) else None
    empty = np.zeros(0, dtype=np.int64)
    if train is not None:
        train.batch[ADV_COLUMN] = adv
    return VerlCollected(train=train, generated=generated, prompts_used=res.prompts_used, gen=sampler.count,
                         advantages=adv.numpy(), stats=stats, cost_metrics=res.cost_metrics,
                         groups=np.concatenate(sampler.groups) if sampler.groups else empty,
                         rounds=np.concatenate(sampler.rounds) if sampler.rounds else empty,
                         train_rows=np.asarray(res.rows, dtype=np.int64))
