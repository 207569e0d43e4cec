"""Task protocol: a training stream of problems, held-out benchmarks and a verifier.

A task turns problems into prompt token ids (with its tokenizer and prompt template) and
scores decoded responses with a verifiable reward in {0, 1}.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Problem:
    prompt: str  # the text fed to the model (template applied)
    answer: str  # ground truth for the verifier
    source: str = ""  # data source / benchmark / difficulty level
    meta: dict = field(default_factory=dict, hash=False, compare=False)


class Tokenizer(Protocol):
    eos_id: int
    pad_id: int
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...


class Task(Protocol):
    name: str
    tokenizer: Tokenizer

    def train_problems(self, start: int, count: int, seed: int) -> list[Problem]:
        """Problems ``start .. start+count-1`` of the seeded training stream (deterministic,
        so a resumed run continues from its data position)."""
        ...

    def benchmarks(self) -> dict[str, list[Problem]]:
        """Fixed held-out sets, easy to hard, plus out-of-distribution ones."""
        ...

    def encode_prompt(self, problem: Problem) -> list[int]: ...

    def score(self, response: str, problem: Problem) -> float:
        """Reward in {0, 1}. May raise or hang: callers wrap it with ``safe_score``."""
        ...
