"""A stand-in engine over a finite prompt set with stable ids and a method state, for the
history-based steps (aero-mem, Knapsack RL, GRESO): N prompts with fixed success rates, drawn P
at a time in seeded epochs, ids "item j"; rewards drawn from a seeded generator."""

from __future__ import annotations

import numpy as np

from trainer.methods.sampler import Samples


class KeyedSampler:
    """N prompts with fixed success rates, drawn P at a time in seeded epochs; ids "item j"."""

    def __init__(self, p_solve, P: int, seed: int, state: dict | None = None):
        self.p_solve, self.P, self.N = np.asarray(p_solve, dtype=float), P, len(p_solve)
        self.rng, self.seed = np.random.default_rng(seed), seed
        self.state = {} if state is None else state
        self.pos, self.batch, self.first_rows, self.counts = 0, np.zeros(0, dtype=np.int64), 0, []
        self.history: list[np.ndarray] = []

    def next_prompts(self) -> int:
        order = [np.random.default_rng([self.seed, (self.pos + i) // self.N]).permutation(self.N)[(self.pos + i) % self.N]
                 for i in range(self.P)]
        self.batch, self.pos = np.array(order), self.pos + self.P
        self.first_rows = 0  # row ids are per step, as the adapters'
        return self.P

    def prompt_keys(self) -> list[str]:
        return [f"item {j}" for j in self.batch]

    def sample(self, counts, round_: int) -> Samples:
        self.counts.append(np.asarray(counts))
        self.history.append(self.batch.copy())  # the batch each call sampled
        prompt = np.repeat(np.arange(self.P), counts)
        reward = (self.rng.random(len(prompt)) < self.p_solve[self.batch[prompt]]).astype(float)
        length = self.rng.integers(1, 12, len(prompt))
        s = Samples.build(self.first_rows, prompt, reward, length, length + 4)
        self.first_rows += len(prompt)
        return s
