"""Task protocol: a training stream of problems, held-out benchmarks and a verifier.

A task turns problems into prompt token ids (with its tokenizer and prompt template) and
scores decoded responses with a verifiable reward in {0, 1}.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence


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


BatchScorer = Callable[[Sequence[str], Sequence[Problem]], tuple[list[float], dict[str, float]]]


class Task(Protocol):
    """What the loop, the evaluation and ``trainer.tasks.verify`` call. The last four members
    say how ``score`` may be called; every task sets all four, so the verifier reads them
    instead of guessing (``trainer/tasks/verify.py`` has the isolation levels):

    ``score_is_safe``     True when ``score`` cannot hang the caller (an exact match, a sandbox
                          bounded by its own clock): it is called directly, without a watchdog.
    ``isolated_scorer``   a picklable ``(response, problem) -> float`` run in a killable
                          subprocess (math-verify can hold the GIL for minutes), or None.
    ``isolated_preload``  ``"module:function"`` names each such subprocess calls once at start.
    ``score_many``        scores a whole batch under the task's own limits and returns
                          ``(rewards, stats)`` (code: the sandbox and its outcome counts), or None.
    """

    name: str
    tokenizer: Tokenizer
    score_is_safe: bool
    isolated_scorer: Callable[[str, Problem], float] | None
    isolated_preload: tuple[str, ...]
    score_many: BatchScorer | None

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
