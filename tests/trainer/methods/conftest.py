"""A deterministic stand-in engine for the method steps (trainer.methods.sampler.Sampler):
prompt p of every batch is solved with its own probability, lengths are random, all drawn
from a seeded generator. Pure logic, no model: the steps are tested as the algorithms they
are; the engines' own adapters are tested against real engines elsewhere."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from trainer.methods.sampler import Samples


@dataclass(eq=False)
class Row:
    """What the embedded engine's Rollout carries that a step reads."""

    prompt_index: int
    reward: float
    length: int
    prompt_len: int
    round: int


class FakeSampler:
    def __init__(self, P: int, seed: int, p_solve=None, max_len: int = 12):
        self.P, self.rng, self.max_len = P, np.random.default_rng(seed), max_len
        self.p_solve = np.asarray(p_solve if p_solve is not None else self.rng.choice([0.0, 0.05, 0.3, 0.7, 1.0], P))
        self.rows: list[Row] = []
        self.batches, self.calls = 0, 0

    def next_prompts(self) -> int:
        self.batches += 1
        if self.batches > 1:  # a new batch: new prompts, new difficulties
            self.p_solve = self.rng.permutation(self.p_solve)
        return self.P

    def sample(self, counts, round_: int) -> Samples:
        self.calls += 1
        first = len(self.rows)
        for p, n in enumerate(counts):
            for _ in range(int(n)):
                self.rows.append(Row(p, float(self.rng.random() < self.p_solve[p]), int(self.rng.integers(1, self.max_len + 1)),
                                     3 + p % 4, round_))
        new = self.rows[first:]
        return Samples.build(first, [r.prompt_index for r in new], [r.reward for r in new], [r.length for r in new],
                             [r.prompt_len + r.length for r in new])


@pytest.fixture
def fake_sampler():
    """The FakeSampler class (a deterministic stand-in engine)."""
    return FakeSampler
