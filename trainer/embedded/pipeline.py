"""Asynchronous training on the embedded engine: a sampler thread runs the method's steps up to
``k = offpolicy.max_staleness`` policy versions ahead of the trainer (trainer/spec/offpolicy.py).

    sampler thread                                    trainer (the loop's thread)
    for j in start+1 .. steps:                        for j in start+1 .. steps:
        wait until version v_j = max(start, j-1-k)        c_j <- the sampler's step j (wait for it)
        load version v_j's weights into its copy          proximal log-probs if v_j < j-1 (tis, mis)
        c_j <- collect(step j), all of it on v_j          update on c_j -> publish version j
                                                          log, evaluate, checkpoint

A version is the policy after a number of training steps. Which version samples which step is
fixed (``v_j``), not a race between the threads, so a run is reproducible from its seed and a
step's staleness is ``j - 1 - v_j = min(k, j - 1 - start)``. The whole step of a method
(AERO's exploration and every rescue round, DAPO's refills) samples with one version; the
method's state (aero-mem's memory, GRESO's and Knapsack's histories) is updated in sampling
order, k steps before the rows train.

How the weights travel: both threads share the process. After each update the trainer copies
its parameters (``state_dict`` clones, one model's worth of memory per version in flight, at
most k + 1); the sampler loads them into its own copy of the model (``load_state_dict``) before
the step that version samples. Evaluation samples from the trainer's model with the run's own
sampler object, beside the sampler thread's copy.

Checkpoints: a checkpoint after step s saves the trainer's weights and optimizer with the
sampler's RNGs, method state and data position as they were before it began step s + 1 (a
snapshot taken when each step starts). A resumed run re-samples the steps that were in flight,
with version s; every step is stored once.
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from trainer.embedded.checkpoint import numpy_rng_state
from trainer.embedded.collect import Collected, StepContext, collect


def sampling_version(step: int, start: int, max_staleness: int) -> int:
    """The policy version (training steps done) that samples ``step`` of a run that started (or
    resumed) after step ``start``: v_j = max(start, j - 1 - k)."""
    return max(start, step - 1 - max_staleness)


@dataclass
class Sampled:
    """One step the sampler finished: what it collected, the version that sampled it, its detail
    builder and timings."""

    collected: Collected
    version: int
    data_pos: int  # the training stream's position the step started from
    detail: Any
    collect_s: float
    waited_s: float  # how long the sampler waited for this step's version (its idle time)


class AsyncSampler:
    """The sampler thread of one run (module docstring). ``ctx`` is the run's step context: its
    RNGs and method state become the sampler's; ``model`` is the trainer's policy, copied once."""

    def __init__(self, ctx: StepContext, model: torch.nn.Module, *, start: int, steps: int, data_pos: int,
                 max_staleness: int):
        self.ctx, self.start, self.steps, self.k = ctx, start, steps, max_staleness
        self.trainer_model = model
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        self.sampler = copy.copy(ctx.sampler)  # the hf sampler holds settings and its model only
        self.sampler.sync_weights(self.model)
        ctx.sampler = self.sampler
        self.data_pos = data_pos
        self.versions: dict[int, dict[str, torch.Tensor]] = {}  # published weights not yet loaded
        self.loaded = start  # the version in self.model (the trainer's weights at start)
        self.ready: dict[int, Sampled] = {}
        self.before: dict[int, dict[str, Any]] = {}  # sampler state before each started step (checkpoints)
        self.error: BaseException | None = None
        self.last_detail: Any = None  # the detail builder of the step the trainer took last
        self.closing = False
        self.cond = threading.Condition()
        self.lock = threading.Lock()  # held while the sampler samples a step: a checkpoint waits on it
        self.thread = threading.Thread(target=self._run, name="aero-sampler", daemon=True)
        self.thread.start()

    # ------------------------------------------------------------------ the sampler thread

    def _snapshot(self) -> dict[str, Any]:
        return {"sampling_rng": self.ctx.gen.get_state().clone(), "curation_rng": numpy_rng_state(self.ctx.rng),
                "method_state": copy.deepcopy(self.ctx.method_state), "data_pos": self.data_pos}

    def _run(self) -> None:
        try:
            for step in range(self.start + 1, self.steps + 1):
                version = sampling_version(step, self.start, self.k)
                t0 = time.perf_counter()
                with self.cond:
                    while not self.closing and version > self.loaded and version not in self.versions:
                        self.cond.wait()
                    if self.closing:
                        return
                    weights = self.versions.pop(version, None)
                    for old in [v for v in self.versions if v < version]:
                        del self.versions[old]
                waited = time.perf_counter() - t0
                with self.lock:
                    if weights is not None:
                        self.model.load_state_dict(weights)
                        self.loaded = version
                    self.before[step] = self._snapshot()
                    t1, data_pos = time.perf_counter(), self.data_pos
                    c = collect(self.ctx, data_pos)
                    for r in c.generated:
                        r.version = version
                    self.data_pos += c.prompts_used
                    sampled = Sampled(c, version, data_pos, self.ctx.detail, time.perf_counter() - t1, waited)
                with self.cond:
                    self.ready[step] = sampled
                    self.cond.notify_all()
        except BaseException as e:  # noqa: BLE001  (re-raised in the trainer's thread by take())
            with self.cond:
                self.error = e
                self.cond.notify_all()

    # ------------------------------------------------------------------ the trainer's side

    def take(self, step: int) -> tuple[Sampled, float]:
        """The sampler's step ``step`` and how long the trainer waited for it (its idle time)."""
        t0 = time.perf_counter()
        with self.cond:
            while step not in self.ready and self.error is None:
                self.cond.wait()
            if step not in self.ready:
                raise RuntimeError(f"the sampler thread failed before step {step}") from self.error
            sampled = self.ready.pop(step)
        self.last_detail = sampled.detail
        return sampled, time.perf_counter() - t0

    def publish(self, version: int) -> None:
        """Hand the trainer's weights after ``version`` training steps to the sampler, if a step
        still to sample needs them."""
        if version > sampling_version(self.steps, self.start, self.k):
            return
        weights = {k: v.detach().clone() for k, v in self.trainer_model.state_dict().items()}
        with self.cond:
            self.versions[version] = weights
            self.cond.notify_all()

    def sampler_state(self, step: int) -> dict[str, Any]:
        """The sampler's RNGs, method state and data position before it began ``step + 1``: what a
        checkpoint after ``step`` saves, so a resume re-samples the steps in flight. Earlier
        snapshots are dropped."""
        with self.lock:
            for old in [s for s in self.before if s <= step]:
                del self.before[old]
            return self.before.get(step + 1) or self._snapshot()

    def close(self) -> None:
        """Stop the sampler after the step it is sampling (if any) and wait for it."""
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.thread.join()
