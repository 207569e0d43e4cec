"""Tasks: datasets + verifiers, selected by name (``make_task("arithmetic")``): every run's task
is built through here (trainer/embedded/presets.py::build_task). The one list of tasks is
trainer/tasks/registry.py; ``TASKS`` maps its names to the classes.

``arithmetic``: the embedded synthetic task (levels L1-L6 + OOD), char tokenizer, exact match.
``countdown``: reach a target from given numbers (TinyZero's task), char tokenizer, a strict verifier.
``math``: verl parquet / JSONL problems, the paper's prompt, math-verify reward.
``code``: APPS/TACO/CodeContests/PRIME/MBPP-style problems, the paper's code prompt, sandboxed tests.
Math and code import their heavy dependencies (math-verify, pyarrow, transformers) lazily.
``strata``: scripted rewards with the paper's prompt strata on a random-weight model_shape (cost
benchmarks only: no learning is measured).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common.refs import load
from trainer.tasks.registry import TASK_SPECS, get_task_spec

if TYPE_CHECKING:
    from trainer.tasks.base import Task

# Imported on first use (PEP 562), so that importing the light registry (the API's config
# validation does) never loads the task modules and their dependencies.
_LAZY = {"ArithmeticTask": "trainer.tasks.arithmetic", "CodeTask": "trainer.tasks.code",
         "CountdownTask": "trainer.tasks.countdown", "MathTask": "trainer.tasks.math", "StrataTask": "trainer.tasks.scripted",
         "CharTokenizer": "trainer.tasks.tokenizer", "Problem": "trainer.tasks.base", "Task": "trainer.tasks.base",
         "Tokenizer": "trainer.tasks.base", "safe_score": "trainer.tasks.verify", "score_batch": "trainer.tasks.verify"}


def __getattr__(name: str) -> Any:
    if name == "TASKS":  # {name: class} of every registered task
        return {n: load(spec.task_class) for n, spec in TASK_SPECS.items()}
    if name in _LAZY:
        return load(f"{_LAZY[name]}:{name}")
    raise AttributeError(f"module 'trainer.tasks' has no attribute {name!r}")


def make_task(name: str, **kw: Any) -> "Task":
    """Build a task by name; keyword arguments go to its constructor."""
    return load(get_task_spec(name).task_class)(**kw)


__all__ = ["TASKS", "make_task", *_LAZY]
