"""The reward function verl's reward loop calls (``reward.custom_reward_function.path`` points
at this file, ``name=compute_score``): a generated task's own verifier (arithmetic, countdown), or the math task's verifier, math-verify on the last
``\\boxed{}`` (trainer.tasks.math.score_math), so the verl engine rewards exactly as the
embedded one.

verl imports this file by path inside its reward-loop workers, so aero-lab must be installed
in the Python environment of every Ray node. The reward loop runs scorers in an executor
thread, where math-verify's signal-based timeouts cannot work; ``score_math`` runs with them
off (as everywhere in the platform), so a pathological answer is bounded only by
``max_answer_chars``.
"""

from __future__ import annotations

from typing import Any


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                  **_: Any) -> dict[str, float]:
    """{"score": r, "acc": r} with r in {0.0, 1.0}. ``acc`` survives DAPO's overlong shaping of
    the score, so curation and DAPO's group filter read correctness from it. Rows written for
    a generated task (``extra_info.task``, trainer/verl/data.py) score by that task's verifier
    (trainer/tasks/registry.py): the exact one for a char preset, the free-text one when the row
    was asked in words (``extra_info.chat``, a real model); every other row is a math problem."""
    from trainer.tasks.base import Problem
    from common.refs import load
    from trainer.tasks.registry import TASK_SPECS

    info = extra_info or {}
    spec = TASK_SPECS.get(str(info.get("task")))
    if spec is not None and spec.score_problem is not None:
        problem = Problem(prompt=str(info.get("problem", "")), answer=str(ground_truth), source=str(data_source))
        score = spec.score_text if info.get("chat") else spec.score_problem
        r = float(load(score)(solution_str, problem))
        return {"score": r, "acc": r}
    from trainer.tasks.math import normalize_ground_truth, score_math

    r = score_math(solution_str, Problem(prompt="", answer=normalize_ground_truth(ground_truth), source=str(data_source)))
    return {"score": float(r), "acc": float(r)}
