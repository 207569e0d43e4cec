"""The sampler interface the method steps are written against (engine-independent).

An adapter (trainer/embedded/collect.py for the embedded engine, trainer/verl/collect.py for verl's
DataProto) owns the prompts, the engine and the verifier; a step only asks it for prompt
batches and for rollouts, and sees their outcomes as numpy arrays. A sampler serves one step;
every row it generates has a global id in generation order (0 for the first call's first row),
so a step names the rows to train on by id and the adapter picks them from what it generated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from trainer.core.strata import is_correct


@dataclass(frozen=True)
class Samples:
    """The rows of one sampler call. Row i has global id ``first_row + i``.

    prompt_of_row: int[N] prompt index within the current prompt batch; reward: float[N] the
    verifier's reward; correct: bool[N] (``is_correct(reward)`` unless the engine reports
    accuracy apart from a shaped reward); length: int[N] response tokens; tokens: [N] prompt +
    response tokens."""

    first_row: int
    prompt_of_row: np.ndarray
    reward: np.ndarray
    correct: np.ndarray
    length: np.ndarray
    tokens: np.ndarray

    @classmethod
    def build(cls, first_row: int, prompt_of_row, reward, length, tokens, correct=None) -> Samples:
        reward = np.asarray(reward, dtype=np.float64)
        return cls(first_row, np.asarray(prompt_of_row, dtype=np.int64), reward,
                   is_correct(reward) if correct is None else np.asarray(correct, dtype=bool),
                   np.asarray(length, dtype=np.int64), np.asarray(tokens))

    def __len__(self) -> int:
        return len(self.prompt_of_row)

    @property
    def ids(self) -> np.ndarray:
        return self.first_row + np.arange(len(self), dtype=np.int64)

    def rows_by_prompt(self, P: int) -> list[np.ndarray]:
        """Per prompt, the global ids of its rows in generation order."""
        ids = self.ids
        return [ids[self.prompt_of_row == p] for p in range(P)]

    def correct_by_prompt(self, P: int) -> np.ndarray:
        """int[P]: correct rows per prompt."""
        return np.bincount(self.prompt_of_row, weights=self.correct, minlength=P).astype(np.int64)


React = Callable[[Samples, int], Sequence[tuple[int, int, int]]]


class Sampler(Protocol):
    """What a step may ask of an engine (module docstring). ``state``: a method's own plain-data
    state across steps (aero-mem's prompt memory), which the adapter keeps and checkpoints."""

    state: dict

    def next_prompts(self) -> int:
        """Draw the next batch of prompts (the data stream moves on); returns its size."""
        ...

    def sample(self, counts: Sequence[int], round_: int) -> Samples:
        """Generate and score ``counts[p]`` rollouts for prompt p of the current batch, in one
        engine call; ``round_`` tags them (0 = the step's first generation)."""
        ...

    def stream(self, first: Sequence[int], react: React) -> list[Samples]:
        """Generate and score ``first[p]`` rollouts of prompt p (round 0) and every block ``react``
        asks for, in ONE continuous batch: ``react(block, round)`` gets a block's scored rows (one
        prompt's) when its last row is scored and returns the blocks to add, as (prompt, count,
        round). Returns every block's rows, in id order (ids are given as blocks are asked for).
        Engines without a continuous batch do not have it (the config refuses rollout.schedule)."""
        ...

    def prompt_keys(self) -> list[str | None]:
        """Stable ids of the current batch's prompts (``Problem.meta["where"]``: a training file's
        row or line, an arithmetic finite-set item), None where a prompt has none."""
        ...


class RowLog:
    """Every row a step has seen, by global id (rows arrive in id order)."""

    def __init__(self) -> None:
        self.parts: list[Samples] = []

    def add(self, s: Samples) -> Samples:
        self.parts.append(s)
        return s

    def column(self, name: str) -> np.ndarray:
        return np.concatenate([getattr(s, name) for s in self.parts]) if self.parts else np.zeros(0)

    def __len__(self) -> int:
        return sum(len(s) for s in self.parts)
