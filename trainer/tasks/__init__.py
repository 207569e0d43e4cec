"""Tasks: datasets + verifiers, selected by name (``make_task("arithmetic")``): every run's task
is built through here (trainer/embedded/presets.py::build_task), so ``TASKS`` is the one list of tasks.

``arithmetic``: the embedded synthetic task (levels L1-L6 + OOD), char tokenizer, exact match.
``math``: verl parquet / JSONL problems, the paper's prompt, math-verify reward.
``code``: APPS/TACO/CodeContests/PRIME/MBPP-style problems, the paper's code prompt, sandboxed tests.
Math and code import their heavy dependencies (math-verify, pyarrow, transformers) lazily.
``strata``: scripted rewards with the paper's prompt strata on a random-weight model_shape (cost
benchmarks only: no learning is measured).
"""

from __future__ import annotations

from typing import Any

from trainer.tasks.arithmetic import ArithmeticTask
from trainer.tasks.base import Problem, Task, Tokenizer
from trainer.tasks.code import CodeTask
from trainer.tasks.math import MathTask
from trainer.tasks.strata import StrataTask
from trainer.tasks.tokenizer import CharTokenizer
from trainer.tasks.verify import safe_score, score_batch

TASKS: dict[str, type[Task]] = {"arithmetic": ArithmeticTask, "math": MathTask, "code": CodeTask, "strata": StrataTask}


def make_task(name: str, **kw: Any) -> Task:
    """Build a task by name; keyword arguments go to its constructor."""
    try:
        cls = TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known: {sorted(TASKS)}") from None
    return cls(**kw)


__all__ = ["TASKS", "make_task", "ArithmeticTask", "CodeTask", "MathTask", "StrataTask", "CharTokenizer", "Problem", "Task", "Tokenizer",
           "safe_score", "score_batch"]
