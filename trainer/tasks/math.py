"""The math task: verl-format (or flat) problem files, the paper's prompt, math-verify reward.

Rows are read from parquet (pyarrow), JSONL or a JSON list. Accepted layouts, per row:

* verl: ``prompt`` (a chat list ``[{"role", "content"}, ...]`` or a string),
  ``reward_model.ground_truth``, optional ``data_source``.
* flat: ``problem`` or ``question`` for the text; ``answer``, ``final_answer`` (a list in
  OlympiadBench: items joined by ", ") or ``solution`` (its last ``\\boxed{}`` is the
  answer) for the ground truth. Keys match case-insensitively (AIME24 uses ``Problem``,
  ``Answer``). This covers AIME24, AMC23, MATH-500, Minerva and OlympiadBench as they are
  usually distributed.

A bad row raises ``ValueError`` naming the file, the line (JSONL, 1-based) or row (parquet,
0-based) and the missing field.

Prompt: the paper's math system prompt (Appendix E, "System Prompt Design") as a system
message, unless the row's chat list already has one, then the tokenizer's chat template
with the generation prompt. Without a chat template: the messages' contents joined by blank
lines plus ``"\\n\\nSolution:"``.

Reward (paper Appendix E.1, binary correctness): math-verify on the response's last
``\\boxed{...}`` against the ground truth; no box, or a box over ``max_answer_chars``, is 0.
math-verify runs with its signal-based timeouts off (``parsing_timeout=None``,
``timeout_seconds=None``; they raise off the main thread, docs/tasks.md §2). The time limit is
enforced by :mod:`trainer.tasks.verify`, in a killable subprocess (``isolated_scorer``).
"""

from __future__ import annotations

import json
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from trainer.tasks.base import Problem

PAPER_MATH_SYSTEM_PROMPT = (
    "Your task is to solve the given question step by step. You should conduct a systematic, thorough reasoning "
    "process before providing the final answer. This involves analyzing, summarizing, exploring, reassessing, and "
    "refining your reasoning process through multiple iterations. Each reasoning step should include detailed "
    "analysis, verification, and refinement of ideas. Include the final answer in \\boxed{} for closed-form results "
    "such as multiple-choice or numerical answers."
)
PLAIN_SUFFIX = "\n\nSolution:"
QUESTION_FIELDS = ("prompt", "problem", "question")
ANSWER_FIELDS = ("reward_model.ground_truth", "answer", "final_answer", "solution")


# -- answers -------------------------------------------------------------------------------------


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed 5``) in ``text``,
    with nested braces; None if there is none or it is unbalanced."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = start + (6 if text.startswith("\\boxed", start) else 5)
    if text.startswith(" ", i):  # "\boxed 5": up to the next space or dollar
        rest = text[i + 1 :]
        end = min((k for k in (rest.find(" "), rest.find("$")) if k >= 0), default=len(rest))
        return rest[:end] or None
    if not text.startswith("{", i):
        return None
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
    return None


def normalize_ground_truth(value: Any) -> str:
    """Ground truth as one string: lists (OlympiadBench) joined by ", ", numbers str()'d,
    surrounding ``$`` removed."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return ", ".join(normalize_ground_truth(v) for v in value)
    text = str(value).strip()
    return text[1:-1].strip() if len(text) >= 2 and text[0] == "$" and text[-1] == "$" else text


def _silence_timeout_warning(*modules: Any) -> None:
    # math-verify logs a warning when its alarm timeouts are off; we enforce time limits ourselves.
    for mod in modules:
        if hasattr(mod, "TIMEOUT_WARNING_SHOWN"):
            mod.TIMEOUT_WARNING_SHOWN = True


@lru_cache(maxsize=65536)
def _parse_gold(answer: str) -> list:
    from math_verify import parse

    for text in ((answer,) if "\\boxed" in answer else ("\\boxed{" + answer + "}", "$" + answer + "$", answer)):
        gold = parse(text, parsing_timeout=None)
        if gold:
            return gold
    return []


def score_math(response: str, problem: Problem, max_answer_chars: int = 1000) -> float:
    """1.0 iff math-verify finds the response's last boxed answer equal to ``problem.answer``."""
    from math_verify import parse, verify

    boxed = last_boxed(response)
    if boxed is None or not boxed.strip() or len(boxed) > max_answer_chars:
        return 0.0
    gold = _parse_gold(problem.answer)
    pred = parse("\\boxed{" + boxed + "}", parsing_timeout=None)
    if not gold or not pred:
        return 0.0
    return 1.0 if verify(gold, pred, timeout_seconds=None) else 0.0


def warmup() -> None:
    """Import math-verify and run it once (a verifier subprocess calls this before its first
    deadline starts: the first parse builds math-verify's grammar, ~0.1 s)."""
    import math_verify.grader
    import math_verify.parser

    _silence_timeout_warning(math_verify.parser, math_verify.grader)
    score_math("\\boxed{\\frac{1}{2}}", Problem(prompt="", answer="0.5"))


# -- files ---------------------------------------------------------------------------------------


def read_records(path: str | Path) -> list[tuple[str, dict]]:
    """``(where, row)`` pairs from parquet, JSONL or a JSON list; ``where`` is "line N" or "row N"."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file (the math task reads local files only)")
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        return [(f"row {i}", r) for i, r in enumerate(pq.read_table(p).to_pylist())]
    if p.suffix == ".json":
        rows = json.loads(p.read_text())
        if not isinstance(rows, list):
            raise ValueError(f"{p}: a .json file must hold a list of rows")
        return [(f"row {i}", r) for i, r in enumerate(rows)]
    out = []
    with p.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                out.append((f"line {n}", json.loads(line)))
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}: line {n}: invalid JSON ({e.msg})") from None
    return out


def row_field(row: Mapping[str, Any], names: tuple[str, ...]) -> tuple[str, Any] | None:
    low = {str(k).lower(): v for k, v in row.items()}
    for name in names:
        head, _, sub = name.partition(".")
        value = low.get(head)
        if sub and isinstance(value, Mapping):
            value = {str(k).lower(): v for k, v in value.items()}.get(sub)
        elif sub:
            value = None
        if value is not None and not (isinstance(value, str) and not value.strip()):
            return name, value
    return None


def chat_messages(value: Any, where: str) -> list[dict[str, str]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    msgs = list(value)
    if not msgs or not all(isinstance(m, Mapping) and "role" in m and "content" in m for m in msgs):
        raise ValueError(f"{where}: field 'prompt' must be a string or a list of {{role, content}} messages")
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in msgs]


def parse_row(row: Mapping[str, Any], where: str) -> tuple[list[dict[str, str]], str, str | None]:
    """``(messages, ground_truth, data_source)`` from one row in either layout."""
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: expected an object, got {type(row).__name__}")
    q = row_field(row, QUESTION_FIELDS)
    if q is None:
        raise ValueError(f"{where}: missing field 'question' (expected one of {', '.join(QUESTION_FIELDS)})")
    if "reward_model" in {str(k).lower() for k in row}:
        a = row_field(row, ANSWER_FIELDS[:1])
        if a is None:
            raise ValueError(f"{where}: missing field 'reward_model.ground_truth'")
    else:
        a = row_field(row, ANSWER_FIELDS[1:])
        if a is None:
            raise ValueError(f"{where}: missing field 'answer' (expected one of {', '.join(ANSWER_FIELDS)})")
    name, value = a
    if name == "solution":
        value = last_boxed(" ".join(value) if isinstance(value, (list, tuple)) else str(value))
        if value is None:
            raise ValueError(f"{where}: field 'solution' has no \\boxed{{}} answer")
    source = row_field(row, ("data_source",))
    return chat_messages(q[1], where), normalize_ground_truth(value), (str(source[1]) if source else None)


# -- tokenizer and prompt ------------------------------------------------------------------------


class HFTokenizer:
    """The Task ``Tokenizer`` protocol over a Hugging Face tokenizer (``.hf``).
    ``encode`` adds no special tokens; ``decode`` skips them. ``pad_id`` falls back to EOS."""

    def __init__(self, hf: Any):
        self.hf = hf
        self.eos_id: int = hf.eos_token_id
        self.pad_id: int = hf.pad_token_id if hf.pad_token_id is not None else hf.eos_token_id
        self.bos_id: int | None = hf.bos_token_id
        self.vocab_size: int = len(hf)

    def encode(self, text: str) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=True)

    def save(self, directory: str | Path) -> None:
        self.hf.save_pretrained(str(directory))


def load_hf_tokenizer(model_dir: str | Path) -> Any:
    """A tokenizer from a local model directory; never downloads."""
    from transformers import AutoTokenizer

    p = Path(model_dir)
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: not a local model directory (nothing is downloaded)")
    return AutoTokenizer.from_pretrained(str(p), local_files_only=True)


def format_prompt(messages: list[dict[str, str]], hf: Any, system_prompt: str | None, use_chat_template: bool,
                  plain_suffix: str = PLAIN_SUFFIX) -> str:
    """Prompt text: system prompt (unless the row has its own) + chat template when available;
    without one, the contents joined by blank lines + ``plain_suffix``."""
    if system_prompt and not any(m["role"] == "system" for m in messages):
        messages = [{"role": "system", "content": system_prompt}, *messages]
    if use_chat_template and getattr(hf, "chat_template", None):
        return hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return "\n\n".join(m["content"] for m in messages) + plain_suffix


# -- the task ------------------------------------------------------------------------------------


class FileTask:
    """What the tasks on local files with a Hugging Face tokenizer share (math, code).

    ``tokenizer``: a Hugging Face tokenizer, an :class:`HFTokenizer`, or a local model dir.
    ``benchmark_paths``: ``{name: file}``, e.g. ``{"AIME24": ".../aime24.parquet"}``, kept in
    the given order (list them easy to hard). ``max_prompt_tokens``: drop longer training
    prompts at load (verl's ``filter_overlong_prompts``); ``dropped`` counts them.
    The training stream visits the data in epochs, each a permutation seeded by
    ``(seed, epoch)``: problem ``i`` depends only on ``(seed, i)``.
    Subclasses implement ``load(path, source)`` (and ``score``); attributes their ``load``
    reads must be set before calling this ``__init__``.
    """

    def __init__(self, train_path: str | Path, benchmark_paths: Mapping[str, str | Path] | None, tokenizer: Any,
                 system_prompt: str | None, use_chat_template: bool, max_prompt_tokens: int | None):
        if tokenizer is None:
            raise ValueError(f"{type(self).__name__} needs a tokenizer (a Hugging Face tokenizer or a local model directory)")
        if isinstance(tokenizer, (str, Path)):
            tokenizer = load_hf_tokenizer(tokenizer)
        self.tokenizer = tokenizer if isinstance(tokenizer, HFTokenizer) else HFTokenizer(tokenizer)
        self.system_prompt, self.use_chat_template = system_prompt, use_chat_template
        self.templated = bool(use_chat_template and getattr(self.tokenizer.hf, "chat_template", None))
        self.benchmark_paths = dict(benchmark_paths or {})
        problems = self.load(train_path)
        self.dropped = 0
        if max_prompt_tokens is not None:
            keep = [p for p in problems if len(self.encode_prompt(p)) <= max_prompt_tokens]
            self.dropped, problems = len(problems) - len(keep), keep
        if not problems:
            raise ValueError(f"{train_path}: no training problems" + (" after max_prompt_tokens" if self.dropped else ""))
        self.problems = problems
        self._perm: tuple[int, int, np.ndarray] | None = None
        self._benchmarks: dict[str, list[Problem]] | None = None

    def load(self, path: str | Path, source: str | None = None) -> list[Problem]:
        raise NotImplementedError

    def train_problems(self, start: int, count: int, seed: int) -> list[Problem]:
        n = len(self.problems)
        return [self.problems[int(self._permutation(seed, i // n)[i % n])] for i in range(start, start + count)]

    def _permutation(self, seed: int, epoch: int) -> np.ndarray:
        if self._perm is None or self._perm[:2] != (seed, epoch):
            self._perm = (seed, epoch, np.random.default_rng([seed, epoch]).permutation(len(self.problems)))
        return self._perm[2]

    def benchmarks(self) -> dict[str, list[Problem]]:
        if self._benchmarks is None:
            self._benchmarks = {name: self.load(path, source=name) for name, path in self.benchmark_paths.items()}
        return {k: list(v) for k, v in self._benchmarks.items()}

    def encode_prompt(self, problem: Problem) -> list[int]:
        # A chat template writes its own BOS (if any) as text; a plain prompt gets the tokenizer's.
        return list(self.tokenizer.hf.encode(problem.prompt, add_special_tokens=not self.templated))


class MathTask(FileTask):
    """verl-style math RL task (implements ``trainer.tasks.base.Task``; data handling in
    :class:`FileTask`). Answers are scored with math-verify (:func:`score_math`)."""

    name = "math"
    score_is_safe = False  # math-verify can hang inside sympy: scored in a killable subprocess
    isolated_preload = ("trainer.tasks.math:warmup",)
    score_many = None

    def __init__(
        self,
        train_path: str | Path,
        benchmark_paths: Mapping[str, str | Path] | None = None,
        tokenizer: Any = None,
        system_prompt: str | None = PAPER_MATH_SYSTEM_PROMPT,
        use_chat_template: bool = True,
        max_answer_chars: int = 1000,
        max_prompt_tokens: int | None = None,
    ):
        self.max_answer_chars = max_answer_chars
        self.isolated_scorer = partial(score_math, max_answer_chars=max_answer_chars)
        super().__init__(train_path, benchmark_paths, tokenizer, system_prompt, use_chat_template, max_prompt_tokens)

    def load(self, path: str | Path, source: str | None = None) -> list[Problem]:
        """Problems from one file; ``source`` overrides each row's ``data_source``."""
        out = []
        for where, row in read_records(path):
            messages, answer, data_source = parse_row(row, f"{path}: {where}")
            prompt = format_prompt(messages, self.tokenizer.hf, self.system_prompt, self.use_chat_template)
            question = messages[-1]["content"]
            out.append(Problem(prompt, answer, source or data_source or Path(path).stem, {"question": question, "where": where}))
        return out

    def score(self, response: str, problem: Problem) -> float:
        return score_math(response, problem, self.max_answer_chars)
