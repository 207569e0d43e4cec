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

Randomness is counter-based: problem ``i`` of a stream is a pure function of
``(stream, seed, i)`` through a BLAKE2b hash (no RNG state), so a resumed run continues
exactly and ``stream(0, 20) == stream(0, 10) + stream(10, 10)``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Mapping

import numpy as np

from trainer.tasks.base import Problem
from trainer.tasks.tokenizer import CharTokenizer

BENCHMARK_SEED = 2602_14338  # the paper's arXiv id; never used as a training seed domain
_MAX_REDRAWS = 64


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


def _hash_words(domain: str, seed: int, index: int, attempt: int) -> list[int]:
    """Four independent uniform 64-bit words for draw ``index`` of a stream."""
    h = hashlib.blake2b(f"{domain}|{seed}|{index}|{attempt}".encode(), digest_size=32).digest()
    return [int.from_bytes(h[k : k + 8], "little") for k in range(0, 32, 8)]


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
    if weights is None:
        return {name: 1.0 / len(LEVELS) for name in LEVELS}
    bad = [k for k in weights if k not in ALL_LEVELS]
    if bad:
        raise ValueError(f"level_weights: unknown level(s) {bad}; known: {list(ALL_LEVELS)}")
    if any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
        raise ValueError(f"level_weights: weights must be >= 0 with a positive sum; got {dict(weights)}")
    total = float(sum(weights.values()))
    # Canonical level order, so {"L2": 1, "L1": 1} and {"L1": 1, "L2": 1} give the same stream.
    return {k: weights[k] / total for k in ALL_LEVELS if weights.get(k, 0) > 0}


def _pick_level(probs: dict[str, float], word: int) -> str:
    u, acc, name = word / 2.0**64, 0.0, ""
    for name, p in probs.items():
        acc += p
        if u < acc:
            return name
    return name  # float round-off: u just below 1.0


def _distinct(level: Level, size: int, seed: int) -> list[Problem]:
    """The first ``size`` distinct problems of a level's benchmark sequence (prefix-stable:
    a larger size extends a smaller one)."""
    seen: dict[str, Problem] = {}
    j, size = 0, min(size, level.space)
    while len(seen) < size:
        p = make_problem(level, draw_operands(level, _hash_words(f"bench|{level.name}", seed, j, 0)[1:]))
        seen.setdefault(p.prompt, p)
        j += 1
    return [Problem(p.prompt, p.answer, p.source, {"level": level.name, "index": k}) for k, p in enumerate(seen.values())]


def score_exact(response: str, answer: str) -> float:
    """1.0 iff the stripped response is exactly the answer's digits ('07' and '+7' fail)."""
    return 1.0 if response.strip() == answer else 0.0


class ArithmeticTask:
    """The synthetic task family (implements ``trainer.tasks.base.Task``).

    ``level_weights``: training mix over levels (default uniform over L1-L6).
    ``benchmark_size``: problems per held-out set. Each level's benchmark is a prefix of one
    fixed sequence of distinct problems drawn from its own hash domain with ``benchmark_seed``.
    ``holdout_size``: training and SFT streams redraw any problem among the first
    ``holdout_size`` of that sequence, for levels whose space is at least 10x that (all but
    L1, whose 100 problems cannot be split usefully). It is independent of
    ``benchmark_size`` so that changing the eval size never changes the training data;
    benchmark problems past ``holdout_size`` may also occur in training. 0 disables it.
    ``train_size``: None (default) trains on the infinite seeded stream. N > 0 trains on a
    finite set drawn in epochs, as the file-based tasks: the set is the first N problems of seed
    0's training stream (the same set for every seed, as a dataset file is; duplicates possible,
    as in a real dataset), problem j has the stable id ``meta["where"] = "item j"``
    (``meta["index"] = j``), and each epoch is a permutation seeded by ``(seed, epoch)``, so
    problem ``i`` of the stream depends only on ``(seed, i)`` and resume from a data position
    is exact.
    """

    name = "arithmetic"
    score_is_safe = True  # pure-Python exact match: verify.safe_score skips the watchdog thread
    isolated_scorer = None
    isolated_preload: tuple[str, ...] = ()
    score_many = None

    def __init__(
        self,
        level_weights: Mapping[str, float] | None = None,
        benchmark_size: int = 64,
        benchmark_seed: int = BENCHMARK_SEED,
        ood_levels: tuple[str, ...] = ("OOD-add4",),
        holdout_size: int = 64,
        tokenizer: CharTokenizer | None = None,
        train_size: int | None = None,
    ):
        self.level_weights = normalize_weights(level_weights)
        bad = [n for n in ood_levels if n not in OOD_LEVELS]
        if bad:
            raise ValueError(f"ood_levels: unknown {bad}; known: {list(OOD_LEVELS)}")
        if benchmark_size < 1:
            raise ValueError(f"benchmark_size must be >= 1; got {benchmark_size}")
        self.benchmark_size, self.benchmark_seed = benchmark_size, benchmark_seed
        self.ood_levels, self.holdout_size = tuple(ood_levels), holdout_size
        self.tokenizer = tokenizer or CharTokenizer()
        if train_size is not None and train_size < 1:
            raise ValueError(f"train_size must be >= 1 or None; got {train_size}")
        self.train_size = train_size
        self._perm: tuple[int, int, np.ndarray] | None = None

    # -- streams ---------------------------------------------------------------------------

    def _stream(self, domain: str, start: int, count: int, seed: int, weights: dict[str, float]) -> list[Problem]:
        return [self._draw(domain, seed, i, weights) for i in range(start, start + count)]

    def _draw(self, domain: str, seed: int, i: int, weights: dict[str, float]) -> Problem:
        """Draw ``i``: the level comes from the first word of attempt 0, so redraws (of a
        held-out problem) change only the operands and never the level mix."""
        words = _hash_words(domain, seed, i, 0)
        level = ALL_LEVELS[_pick_level(weights, words[0])]
        held = self._held_out.get(level.name, frozenset())
        for attempt in range(_MAX_REDRAWS):
            if attempt:
                words = _hash_words(domain, seed, i, attempt)
            p = make_problem(level, draw_operands(level, words[1:]), index=i)
            if p.prompt not in held:
                return p
        return p  # unreachable in practice: held-out sets are <= 10% of a level

    def train_problems(self, start: int, count: int, seed: int) -> list[Problem]:
        """Problems ``start .. start+count-1`` of the RL training stream for ``seed`` (with
        ``train_size``: of the epochs over the finite training set)."""
        if self.train_size is None:
            return self._stream("train", start, count, seed, self.level_weights)
        n = self.train_size
        return [self._train_set[int(self._permutation(seed, i // n)[i % n])] for i in range(start, start + count)]

    @cached_property
    def _train_set(self) -> list[Problem]:
        """The finite training set: problem j is draw j of seed 0's training stream."""
        drawn = self._stream("train", 0, self.train_size or 0, 0, self.level_weights)
        return [Problem(p.prompt, p.answer, p.source, {"level": p.source, "index": j, "where": f"item {j}"})
                for j, p in enumerate(drawn)]

    def _permutation(self, seed: int, epoch: int) -> np.ndarray:
        if self._perm is None or self._perm[:2] != (seed, epoch):
            self._perm = (seed, epoch, np.random.default_rng([seed, epoch]).permutation(self.train_size))
        return self._perm[2]

    def sft_examples(
        self, count: int, seed: int, level_weights: Mapping[str, float] | None = None, start: int = 0
    ) -> list[tuple[list[int], list[int]]]:
        """Supervised warm-start pairs ``(BOS + prompt ids, answer ids + EOS)`` from a stream
        separate from the RL one. ``level_weights`` defaults to the task's training mix; see
        ``WARM_START_WEIGHTS`` for a mix that under-represents the hardest levels."""
        weights = self.level_weights if level_weights is None else normalize_weights(level_weights)
        return [(self.encode_prompt(p), self.answer_ids(p)) for p in self._stream("sft", start, count, seed, weights)]

    # -- benchmarks ------------------------------------------------------------------------

    def benchmark_names(self) -> list[str]:
        return [*LEVELS, *self.ood_levels]

    @cached_property
    def _benchmarks(self) -> dict[str, list[Problem]]:
        return {name: _distinct(ALL_LEVELS[name], self.benchmark_size, self.benchmark_seed) for name in self.benchmark_names()}

    @cached_property
    def _held_out(self) -> dict[str, frozenset[str]]:
        h = self.holdout_size
        return {
            name: frozenset(p.prompt for p in _distinct(ALL_LEVELS[name], h, self.benchmark_seed))
            for name in self.benchmark_names()
            if h > 0 and 10 * h <= ALL_LEVELS[name].space
        }

    def benchmarks(self) -> dict[str, list[Problem]]:
        """Fixed held-out sets, easy to hard (L1..L6), then the out-of-distribution sets."""
        return {k: list(v) for k, v in self._benchmarks.items()}

    # -- tokens and reward -----------------------------------------------------------------

    def encode_prompt(self, problem: Problem) -> list[int]:
        return [self.tokenizer.bos_id, *self.tokenizer.encode(problem.prompt)]

    def answer_ids(self, problem: Problem) -> list[int]:
        return [*self.tokenizer.encode(problem.answer), self.tokenizer.eos_id]

    def score(self, response: str, problem: Problem) -> float:
        return score_exact(response, problem.answer)
