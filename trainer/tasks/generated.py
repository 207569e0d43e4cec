"""Generated tasks: a seeded stream of problems at named difficulty levels, a char tokenizer
and an exact verifier (arithmetic, countdown). What they share lives here; a task module adds
its levels, how one problem is drawn from hash words, and its verifier.

Randomness is counter-based: problem ``i`` of a stream is a pure function of
``(stream, seed, i)`` through a BLAKE2b hash (no RNG state), so a resumed run continues
exactly and ``stream(0, 20) == stream(0, 10) + stream(10, 10)``.

``level_weights``: training mix over levels (default uniform over the training levels).
``benchmark_size``: problems per held-out set. Each level's benchmark is a prefix of one
fixed sequence of distinct problems drawn from its own hash domain with ``benchmark_seed``.
``holdout_size``: training and SFT streams redraw any problem among the first
``holdout_size`` of that sequence, for levels whose space is at least 10x that (a level too
small to split usefully is not held out). It is independent of ``benchmark_size`` so that
changing the eval size never changes the training data; benchmark problems past
``holdout_size`` may also occur in training. 0 disables it.
``train_size``: None (default) trains on the infinite seeded stream. N > 0 trains on a finite
set drawn in epochs, as the file-based tasks: the set is the first N problems of seed 0's
training stream (the same set for every seed, as a dataset file is; duplicates possible, as in
a real dataset), problem j has the stable id ``meta["where"] = "item j"`` (``meta["index"] =
j``), and each epoch is a permutation seeded by ``(seed, epoch)``, so problem ``i`` of the
stream depends only on ``(seed, i)`` and resume from a data position is exact.
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from typing import Any, ClassVar, Mapping, Protocol

import numpy as np

from trainer.tasks.base import Problem
from trainer.tasks.tokenizer import CharTokenizer

BENCHMARK_SEED = 2602_14338  # the paper's arXiv id; never used as a training seed domain
_MAX_REDRAWS = 64


class Level(Protocol):
    name: str

    @property
    def space(self) -> int:
        """How many distinct problems the level has (at least a lower bound)."""
        ...


def hash_words(domain: str, seed: int, index: int, attempt: int) -> list[int]:
    """Four independent uniform 64-bit words for draw ``index`` of a stream."""
    h = hashlib.blake2b(f"{domain}|{seed}|{index}|{attempt}".encode(), digest_size=32).digest()
    return [int.from_bytes(h[k : k + 8], "little") for k in range(0, 32, 8)]


def normalize_weights(weights: Mapping[str, float] | None, levels: Mapping[str, Level],
                      all_levels: Mapping[str, Level]) -> dict[str, float]:
    """Level weights -> probabilities, in the canonical level order (so {"L2": 1, "L1": 1} and
    {"L1": 1, "L2": 1} give the same stream). None = uniform over ``levels``."""
    if weights is None:
        return {name: 1.0 / len(levels) for name in levels}
    bad = [k for k in weights if k not in all_levels]
    if bad:
        raise ValueError(f"level_weights: unknown level(s) {bad}; known: {list(all_levels)}")
    if any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
        raise ValueError(f"level_weights: weights must be >= 0 with a positive sum; got {dict(weights)}")
    total = float(sum(weights.values()))
    return {k: weights[k] / total for k in all_levels if weights.get(k, 0) > 0}


def _pick_level(probs: dict[str, float], word: int) -> str:
    u, acc, name = word / 2.0**64, 0.0, ""
    for name, p in probs.items():
        acc += p
        if u < acc:
            return name
    return name  # float round-off: u just below 1.0


class GeneratedTask:
    """The shared half of a generated task (implements ``trainer.tasks.base.Task`` with a
    subclass's ``LEVELS``, ``OOD_LEVELS``, ``draw`` and ``score``); see the module docstring."""

    name: ClassVar[str]
    LEVELS: ClassVar[Mapping[str, Level]]  # the training levels, easy to hard
    OOD_LEVELS: ClassVar[Mapping[str, Level]]  # held-out-only levels
    DEFAULT_OOD: ClassVar[tuple[str, ...]]
    WARM_START: ClassVar[Mapping[str, float]]  # the warm start's level mix (trainer/embedded/pretrain.py)
    CHARS: ClassVar[str]  # the char tokenizer's vocabulary
    score_is_safe = True  # pure-Python exact checks: verify.safe_score skips the watchdog thread
    isolated_scorer = None
    isolated_preload: tuple[str, ...] = ()
    score_many = None

    def __init__(self, level_weights: Mapping[str, float] | None = None, benchmark_size: int = 64,
                 benchmark_seed: int = BENCHMARK_SEED, ood_levels: tuple[str, ...] | None = None,
                 holdout_size: int = 64, tokenizer: CharTokenizer | None = None, train_size: int | None = None,
                 chat: Any = None):
        self.level_weights = self.normalize_weights(level_weights)
        ood_levels = self.DEFAULT_OOD if ood_levels is None else tuple(ood_levels)
        bad = [n for n in ood_levels if n not in self.OOD_LEVELS]
        if bad:
            raise ValueError(f"ood_levels: unknown {bad}; known: {list(self.OOD_LEVELS)}")
        if benchmark_size < 1:
            raise ValueError(f"benchmark_size must be >= 1; got {benchmark_size}")
        self.benchmark_size, self.benchmark_seed = benchmark_size, benchmark_seed
        self.ood_levels, self.holdout_size = ood_levels, holdout_size
        # A real model (trainer/tasks/chat_format.py): the same problems, asked in words through its
        # chat template and scored on free text; else the char tokenizer and the exact answer.
        self.chat = chat
        self.tokenizer = chat.tokenizer if chat is not None else tokenizer or CharTokenizer(self.CHARS)
        if train_size is not None and train_size < 1:
            raise ValueError(f"train_size must be >= 1 or None; got {train_size}")
        self.train_size = train_size
        self._perm: tuple[int, int, np.ndarray] | None = None

    @classmethod
    def all_levels(cls) -> dict[str, Level]:
        return {**cls.LEVELS, **cls.OOD_LEVELS}

    @classmethod
    def normalize_weights(cls, weights: Mapping[str, float] | None) -> dict[str, float]:
        return normalize_weights(weights, cls.LEVELS, cls.all_levels())

    # -- what a task module supplies ------------------------------------------------------

    def draw(self, level, words: list[int], index: int) -> Problem:
        """Problem ``index`` of ``level`` from three uniform 64-bit words (a pure function)."""
        raise NotImplementedError

    def score_exact(self, response: str, problem: Problem) -> float:
        """The char presets' verifier: the response is exactly the answer."""
        raise NotImplementedError

    def question(self, problem: Problem) -> str:
        """The problem in words, for a real model (trainer/tasks/chat_format.py)."""
        raise NotImplementedError

    def score_text(self, response: str, problem: Problem) -> float:
        """A real model's verifier: the final answer read out of free text."""
        raise NotImplementedError

    def score(self, response: str, problem: Problem) -> float:
        return self.score_text(response, problem) if self.chat is not None else self.score_exact(response, problem)

    # -- streams ---------------------------------------------------------------------------

    def _stream(self, domain: str, start: int, count: int, seed: int, weights: dict[str, float]) -> list[Problem]:
        return [self._draw(domain, seed, i, weights) for i in range(start, start + count)]

    def _draw(self, domain: str, seed: int, i: int, weights: dict[str, float]) -> Problem:
        """Draw ``i``: the level comes from the first word of attempt 0, so redraws (of a
        held-out problem) change only the problem and never the level mix."""
        words = hash_words(domain, seed, i, 0)
        level = self.all_levels()[_pick_level(weights, words[0])]
        held = self._held_out.get(level.name, frozenset())
        for attempt in range(_MAX_REDRAWS):
            if attempt:
                words = hash_words(domain, seed, i, attempt)
            p = self.draw(level, words[1:], i)
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
        return [Problem(p.prompt, p.answer, p.source, {**p.meta, "level": p.source, "index": j, "where": f"item {j}"})
                for j, p in enumerate(drawn)]

    def _permutation(self, seed: int, epoch: int) -> np.ndarray:
        if self._perm is None or self._perm[:2] != (seed, epoch):
            self._perm = (seed, epoch, np.random.default_rng([seed, epoch]).permutation(self.train_size))
        return self._perm[2]

    def sft_examples(self, count: int, seed: int, level_weights: Mapping[str, float] | None = None,
                     start: int = 0) -> list[tuple[list[int], list[int]]]:
        """Supervised warm-start pairs ``(BOS + prompt ids, answer ids + EOS)`` from a stream
        separate from the RL one. ``level_weights`` defaults to the task's training mix."""
        weights = self.level_weights if level_weights is None else self.normalize_weights(level_weights)
        return [(self.encode_prompt(p), self.answer_ids(p)) for p in self._stream("sft", start, count, seed, weights)]

    # -- benchmarks ------------------------------------------------------------------------

    def benchmark_names(self) -> list[str]:
        return [*self.LEVELS, *self.ood_levels]

    def _distinct(self, level, size: int, seed: int) -> list[Problem]:
        """The first ``size`` distinct problems of a level's benchmark sequence (prefix-stable:
        a larger size extends a smaller one)."""
        seen: dict[str, Problem] = {}
        j, size = 0, min(size, level.space)
        while len(seen) < size:
            p = self.draw(level, hash_words(f"bench|{level.name}", seed, j, 0)[1:], -1)
            seen.setdefault(p.prompt, p)
            j += 1
        return [Problem(p.prompt, p.answer, p.source, {**p.meta, "level": level.name, "index": k})
                for k, p in enumerate(seen.values())]

    @cached_property
    def _benchmarks(self) -> dict[str, list[Problem]]:
        levels = self.all_levels()
        return {name: self._distinct(levels[name], self.benchmark_size, self.benchmark_seed)
                for name in self.benchmark_names()}

    @cached_property
    def _held_out(self) -> dict[str, frozenset[str]]:
        h, levels = self.holdout_size, self.all_levels()
        return {name: frozenset(p.prompt for p in self._distinct(levels[name], h, self.benchmark_seed))
                for name in self.benchmark_names() if h > 0 and 10 * h <= levels[name].space}

    def benchmarks(self) -> dict[str, list[Problem]]:
        """Fixed held-out sets, easy to hard, then the out-of-distribution sets."""
        return {k: list(v) for k, v in self._benchmarks.items()}

    # -- tokens ----------------------------------------------------------------------------

    def encode_prompt(self, problem: Problem) -> list[int]:
        if self.chat is not None:
            return self.chat.encode(self.question(problem))
        return [self.tokenizer.bos_id, *self.tokenizer.encode(problem.prompt)]

    def answer_ids(self, problem: Problem) -> list[int]:
        """The warm start's target (char presets only: a real model is not warm-started here)."""
        if self.chat is not None:
            raise ValueError(f"{self.name}: supervised targets are the char presets'; a chat model answers in free text")
        return [*self.tokenizer.encode(problem.answer), self.tokenizer.eos_id]
