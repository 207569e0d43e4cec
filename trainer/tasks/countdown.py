"""Countdown (the TinyZero task): reach a target from given numbers with + - * / and
parentheses, each number used at most once.

A prompt is ``"3 7 9>30:"`` (the numbers, then the target); the model reads ``BOS +
encode(prompt)`` and answers an equation such as ``3*7+9``, then EOS. Many answers can be
right, and the model must search for one: that is what this task adds to arithmetic.

The verifier is strict and never evaluates text as code: :func:`parse_equation` is a
recursive-descent parser over digits, ``+ - * /``, parentheses and spaces (no unary minus, no
leading zeros, at most ``MAX_EQUATION_CHARS`` characters and ``MAX_DEPTH`` nested parentheses),
evaluated with exact rationals. The reward is 1.0 iff the equation parses, uses a sub-multiset
of the given numbers (each at most once; not all need be used), divides by no zero, and equals
the target exactly.

Levels (numbers drawn uniformly, the target from a random expression over all of them whose
intermediate values are positive integers; the expression is the warm start's label):

============ ================================== ========
name         numbers                            target
============ ================================== ========
C2           two numbers in 1-9                 <= 99
C3           three numbers in 1-9               <= 99
C4           four numbers in 1-9                <= 99
OOD-C3big    three numbers in 10-30 (held out)  <= 999
============ ================================== ========
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from trainer.tasks.base import Problem
from trainer.tasks.generated import GeneratedTask

CHARS = "0123456789+-*/()>: "
MAX_EQUATION_CHARS = 64
MAX_DEPTH = 8
OPS = "+-*/"


@dataclass(frozen=True)
class CountdownLevel:
    name: str
    count: int  # how many numbers
    lo: int
    hi: int
    max_target: int
    description: str

    @property
    def space(self) -> int:
        """A lower bound on distinct prompts: the ordered draws of the numbers (each has a target)."""
        return (self.hi - self.lo + 1) ** self.count


LEVELS: dict[str, CountdownLevel] = {lv.name: lv for lv in (
    CountdownLevel("C2", 2, 1, 9, 99, "two numbers in 1-9"),
    CountdownLevel("C3", 3, 1, 9, 99, "three numbers in 1-9"),
    CountdownLevel("C4", 4, 1, 9, 99, "four numbers in 1-9"),
)}
OOD_LEVELS: dict[str, CountdownLevel] = {lv.name: lv for lv in (
    CountdownLevel("OOD-C3big", 3, 10, 30, 999, "three numbers in 10-30 (longer numbers than any training problem)"),
)}
# A warm-start mix that under-represents the hardest level, as arithmetic's does, so RL starts
# with all-fail, partial and all-correct prompts.
WARM_START_WEIGHTS: dict[str, float] = {"C2": 1.0, "C3": 1.0, "C4": 0.35}


# ---------------------------------------------------------------- the verifier


class EquationError(ValueError):
    """The text is not an equation this task accepts (the message says where)."""


def parse_equation(text: str) -> tuple[Fraction, list[int]]:
    """``(value, numbers used)`` of an equation over non-negative integers with ``+ - * /`` and
    parentheses; raises :class:`EquationError` for anything else (a division by zero included)."""
    if len(text) > MAX_EQUATION_CHARS:
        raise EquationError(f"longer than {MAX_EQUATION_CHARS} characters")
    tokens: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == " ":
            i += 1
        elif c.isdigit() and c.isascii():
            j = i
            while j < len(text) and text[j].isdigit() and text[j].isascii():
                j += 1
            if j - i > 1 and text[i] == "0":
                raise EquationError(f"number with a leading zero at {i}")
            tokens.append(text[i:j])
            i = j
        elif c in "+-*/()":
            tokens.append(c)
            i += 1
        else:
            raise EquationError(f"unexpected character {c!r} at {i}")
    if not tokens:
        raise EquationError("empty")
    numbers: list[int] = []
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def factor(depth: int) -> Fraction:
        tok = peek()
        if tok is None:
            raise EquationError("ends where a number or '(' was expected")
        if tok == "(":
            if depth >= MAX_DEPTH:
                raise EquationError(f"more than {MAX_DEPTH} nested parentheses")
            take()
            value = expr(depth + 1)
            if peek() != ")":
                raise EquationError("unclosed '('")
            take()
            return value
        if tok.isdigit():
            numbers.append(int(take()))
            return Fraction(numbers[-1])
        raise EquationError(f"unexpected {tok!r}")

    def term(depth: int) -> Fraction:
        value = factor(depth)
        while peek() in ("*", "/"):
            op, rhs = take(), factor(depth)
            if op == "/" and rhs == 0:
                raise EquationError("division by zero")
            value = value * rhs if op == "*" else value / rhs
        return value

    def expr(depth: int) -> Fraction:
        value = term(depth)
        while peek() in ("+", "-"):
            op, rhs = take(), term(depth)
            value = value + rhs if op == "+" else value - rhs
        return value

    value = expr(0)
    if pos != len(tokens):
        raise EquationError(f"unexpected {tokens[pos]!r} after a complete equation")
    return value, numbers


def uses_at_most_once(used: list[int], given: list[int]) -> bool:
    """True iff ``used`` is a sub-multiset of ``given`` (each given number used at most once)."""
    left = list(given)
    for n in used:
        if n not in left:
            return False
        left.remove(n)
    return True


def score_countdown(response: str, numbers: list[int], target: int) -> float:
    """1.0 iff ``response`` is an equation over ``numbers`` (each at most once) equal to ``target``."""
    try:
        value, used = parse_equation(response.strip())
    except EquationError:
        return 0.0
    return 1.0 if value == target and uses_at_most_once(used, numbers) else 0.0


def parse_prompt(prompt: str) -> tuple[list[int], int]:
    """``"3 7 9>30:"`` -> ([3, 7, 9], 30)."""
    nums, _, rest = prompt.partition(">")
    return [int(x) for x in nums.split()], int(rest.rstrip(":"))


def score_problem(response: str, problem: Problem) -> float:
    """The task's verifier as a plain function (verl's reward calls it by name)."""
    numbers, target = parse_prompt(problem.prompt)
    return score_countdown(response, numbers, target)


def question_text(problem: Problem) -> str:
    """``3 7 9>30:`` in words for a chat model."""
    numbers, target = parse_prompt(problem.prompt)
    listed = ", ".join(map(str, numbers[:-1])) + f" and {numbers[-1]}"
    return (f"Using the numbers {listed}, each at most once, and + - * / with parentheses, write an expression "
            f"equal to {target}. Answer with just the expression.")


_EXPRESSION = re.compile(r"[0-9+\-*/() =×÷xX]*[0-9][0-9+\-*/() =×÷xX]*")


def final_expression(text: str) -> str | None:
    """The last run of equation characters in ``text`` that holds an operator, with ``×``, ``x``
    and ``÷`` read as ``*`` and ``/``. Written as an equation (``3*7+9 = 30`` or ``30 = 3*7+9``),
    its side with an operator; None if there is none."""
    for run in reversed(_EXPRESSION.findall(text)):
        run = run.replace("×", "*").replace("x", "*").replace("X", "*").replace("÷", "/")
        sides = [s.strip() for s in run.split("=")]
        with_op = [s for s in sides if any(op in s for op in OPS)]
        if with_op:
            return with_op[-1]
    return None


def score_problem_text(response: str, problem: Problem) -> float:
    """A chat model's verifier: the final expression in the response (:func:`final_expression`),
    checked as strictly as the char presets' answers."""
    expr = final_expression(response)
    return 0.0 if expr is None else score_problem(expr, problem)


# ---------------------------------------------------------------- the generator


def _render(node, parent_op: str = "", right: bool = False) -> str:
    """An expression tree as text with only the parentheses it needs."""
    if isinstance(node, int):
        return str(node)
    op, a, b = node
    text = f"{_render(a, op)}{op}{_render(b, op, right=True)}"
    prec, parent = (op in "*/"), (parent_op in "*/")
    needs = parent_op and (parent and not prec or (right and (parent_op in "-/") and (prec == parent or parent_op == "/")))
    return f"({text})" if needs else text


def _build(rng: np.random.Generator, numbers: list[int]):
    """A random expression over ``numbers`` (random order, tree shape and operators) whose every
    intermediate value is a positive integer, with its value; None if the draw cannot make one."""
    items: list[tuple[object, int]] = [(n, n) for n in rng.permutation(numbers).tolist()]
    while len(items) > 1:
        i, j = rng.choice(len(items), size=2, replace=False)
        (ta, va), (tb, vb) = items[i], items[j]
        options = [op for op in OPS if (op != "-" or va > vb) and (op != "/" or (vb > 1 and va % vb == 0))]
        op = options[int(rng.integers(len(options)))]
        value = {"+": va + vb, "-": va - vb, "*": va * vb, "/": va // max(vb, 1)}[op]
        items = [x for k, x in enumerate(items) if k not in (i, j)] + [((op, ta, tb), value)]
    return items[0]


def make_problem(level: CountdownLevel, words: list[int], index: int = -1) -> Problem:
    """A problem of ``level`` from three uniform words: the numbers, then expressions drawn until
    one reaches a target in [1, max_target] (its text is the reference answer)."""
    rng = np.random.default_rng(words)
    numbers = [int(x) for x in rng.integers(level.lo, level.hi + 1, size=level.count)]
    for _ in range(256):
        tree, value = _build(rng, numbers)
        if 1 <= value <= level.max_target:
            break
    else:  # every draw overshot (large numbers): the sum is always in range for these levels
        tree, value = ("+", *numbers[:2]), sum(numbers[:2])
    prompt = f"{' '.join(map(str, numbers))}>{value}:"
    return Problem(prompt=prompt, answer=_render(tree), source=level.name,
                   meta={"level": level.name, "index": index})


class CountdownTask(GeneratedTask):
    """Countdown at three levels plus a held-out one (``trainer.tasks.base.Task``); the
    constructor's arguments are the generated tasks' (trainer/tasks/generated.py).
    ``Problem.answer`` is one reference equation; any equation that reaches the target counts."""

    name = "countdown"
    LEVELS = LEVELS
    OOD_LEVELS = OOD_LEVELS
    WARM_START = WARM_START_WEIGHTS
    DEFAULT_OOD = ("OOD-C3big",)
    CHARS = CHARS

    def draw(self, level, words: list[int], index: int) -> Problem:
        return make_problem(level, words, index)

    def score_exact(self, response: str, problem: Problem) -> float:
        return score_problem(response, problem)

    def question(self, problem: Problem) -> str:
        return question_text(problem)

    def score_text(self, response: str, problem: Problem) -> float:
        return score_problem_text(response, problem)
