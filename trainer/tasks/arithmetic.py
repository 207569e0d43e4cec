"""The embedded synthetic task: verifiable integer arithmetic at six difficulty levels.

A prompt is ``"37+85="``; the model reads ``BOS + encode(prompt)`` and must answer the
digits of the exact integer result, then EOS. The reward is exact match (1.0 or 0.0).

Levels (n-digit means [10^(n-1), 10^n - 1]; 1-digit means [0, 9]):

=========== ============================== ==============
name        problem                        answer digits
=========== ============================== ==============
L1-add1     a + b, 1-digit + 1-digit       1-2
L2-add2     2-digit + 2-digit              2-3
L3-sub2     a - b, 2-digit, a >= b         1-2
L4-add3     3-digit + 3-digit              3-4
L5-mul2x1   2-digit * b, b in [2, 9]       2-3
L6-mul2x2   2-digit * 2-digit              3-4
OOD-add4    4-digit + 4-digit (held out)   4-5
OOD-sum3    three 2-digit operands         2-3
=========== ============================== ==============

Streams, benchmarks, hold-out and finite training sets are the generated tasks' own
(trainer/tasks/generated.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from trainer.tasks.base import Problem
from trainer.tasks.chat_format import final_number
from trainer.tasks.generated import GeneratedTask
from trainer.tasks.generated import normalize_weights as _normalize
from trainer.tasks.tokenizer import DEFAULT_CHARS


@dataclass(frozen=True)
class Level:
    name: str
    op: str  # "+", "-" or "*", applied left to right
    ranges: tuple[tuple[int, int], ...]  # inclusive operand ranges
    description: str

    @property
    def space(self) -> int:
        """Number of distinct problems (subtraction keeps a >= b: about half the pairs)."""
        n = 1
        for lo, hi in self.ranges:
            n *= hi - lo + 1
        return n // 2 if self.op == "-" else n


def _lv(name: str, op: str, ranges, description: str) -> Level:
    return Level(name, op, tuple(ranges), description)


D1, D2, D3, D4 = (0, 9), (10, 99), (100, 999), (1000, 9999)
LEVELS: dict[str, Level] = {
    lv.name: lv
    for lv in (
        _lv("L1-add1", "+", (D1, D1), "1-digit + 1-digit addition"),
        _lv("L2-add2", "+", (D2, D2), "2-digit + 2-digit addition"),
        _lv("L3-sub2", "-", (D2, D2), "2-digit - 2-digit subtraction, non-negative result"),
        _lv("L4-add3", "+", (D3, D3), "3-digit + 3-digit addition"),
        _lv("L5-mul2x1", "*", (D2, (2, 9)), "2-digit x 1-digit multiplication (factor 2-9)"),
        _lv("L6-mul2x2", "*", (D2, D2), "2-digit x 2-digit multiplication"),
    )
}
OOD_LEVELS: dict[str, Level] = {
    lv.name: lv
    for lv in (
        _lv("OOD-add4", "+", (D4, D4), "4-digit + 4-digit addition (longer than any training problem)"),
        _lv("OOD-sum3", "+", (D2, D2, D2), "three 2-digit operands (a format never trained on)"),
    )
}
ALL_LEVELS: dict[str, Level] = {**LEVELS, **OOD_LEVELS}

# A warm-start mix that under-represents the two hardest levels (docs/tasks.md §1), so RL
# starts with all three AERO strata (all-fail, partial, all-correct) well populated.
WARM_START_WEIGHTS: dict[str, float] = {
    "L1-add1": 1.0, "L2-add2": 1.0, "L3-sub2": 1.0, "L4-add3": 0.25, "L5-mul2x1": 1.0, "L6-mul2x2": 0.25,
}


def draw_operands(level: Level, words: list[int]) -> tuple[int, ...]:
    """Operands from uniform words (modulo bias < 2^-50). Subtraction orders them so a >= b."""
    ops = tuple(lo + w % (hi - lo + 1) for (lo, hi), w in zip(level.ranges, words))
    return tuple(sorted(ops, reverse=True)) if level.op == "-" else ops


def make_problem(level: Level, operands: tuple[int, ...], index: int = -1) -> Problem:
    result = operands[0]
    for x in operands[1:]:
        result = result + x if level.op == "+" else result - x if level.op == "-" else result * x
    prompt = level.op.join(str(x) for x in operands) + "="
    return Problem(prompt=prompt, answer=str(result), source=level.name, meta={"level": level.name, "index": index})


def normalize_weights(weights: Mapping[str, float] | None) -> dict[str, float]:
    """Level weights -> probabilities. None = uniform over the six training levels."""
    return _normalize(weights, LEVELS, ALL_LEVELS)


def score_exact(response: str, answer: str) -> float:
    """1.0 iff the stripped response is exactly the answer's digits ('07' and '+7' fail)."""
    return 1.0 if response.strip() == answer else 0.0


def score_problem(response: str, problem: Problem) -> float:
    """The task's verifier as a plain function (verl's reward calls it by name)."""
    return score_exact(response, problem.answer)


def question_text(problem: Problem) -> str:
    """``37+85=`` in words for a chat model: ``What is 37 + 85? Answer with just the number.``"""
    expr = problem.prompt.rstrip("=")
    for op in "+-*":
        expr = expr.replace(op, f" {op} ")
    return f"What is {expr}? Answer with just the number."


def score_problem_text(response: str, problem: Problem) -> float:
    """A chat model's verifier: 1.0 iff the last integer in the response is the answer."""
    value = final_number(response)
    return 1.0 if value is not None and value == int(problem.answer) else 0.0


class ArithmeticTask(GeneratedTask):
    """The synthetic arithmetic family (``trainer.tasks.base.Task``); every constructor argument
    is the generated tasks' (trainer/tasks/generated.py). ``ood_levels`` default: OOD-add4."""

    name = "arithmetic"
    LEVELS = LEVELS
    OOD_LEVELS = OOD_LEVELS
    WARM_START = WARM_START_WEIGHTS
    DEFAULT_OOD = ("OOD-add4",)
    CHARS = DEFAULT_CHARS

    def draw(self, level, words: list[int], index: int) -> Problem:
        return make_problem(level, draw_operands(level, words), index=index)

    def score_exact(self, response: str, problem: Problem) -> float:
        return score_problem(response, problem)

    def question(self, problem: Problem) -> str:
        return question_text(problem)

    def score_text(self, response: str, problem: Problem) -> float:
        return score_problem_text(response, problem)
