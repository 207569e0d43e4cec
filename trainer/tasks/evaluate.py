"""Held-out evaluation: eval_n samples per problem, per-problem (n, c) stored so any k <= n
can be recomputed later; Avg@k, unbiased Pass@k and bootstrap CIs (docs/metrics.md "Evaluation")."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from trainer.core.passk import avg_at_k, bootstrap_ci, pass_at_k
from trainer.core.strata import is_correct
from trainer.rollout.base import RolloutSampler, SamplingParams
from trainer.tasks.base import Task
from trainer.tasks.verify import score_batch

EVAL_SEED = 2602_14338  # the paper's arXiv id; eval draws never share a seed with training


def eval_seed(step: int) -> int:
    """The sampling seed of the evaluation at ``step``: the step only, never the run's seed or
    method, so every run from the same base draws the same random numbers at the same eval
    (paired draws: a difference between methods is not a difference of luck). Step 0, the
    base, is evaluated identically by every run."""
    return EVAL_SEED + step


def eval_sampling(cfg) -> SamplingParams:
    """Evaluation sampling: the run's eval_temperature (not its training temperature)."""
    return SamplingParams(cfg.eval_temperature, cfg.top_p, cfg.max_new_tokens)


def summarize(per_problem: list[tuple[int, int]], k: int, seed: int = 0) -> dict[str, Any]:
    """Avg@k, Pass@k and their bootstrap CIs from per-problem (n, c)."""
    n = np.array([p[0] for p in per_problem])
    c = np.array([p[1] for p in per_problem])
    avg_each, pass_each = c / n, pass_at_k(n, c, k, per_problem=True)
    return {
        "n": int(n.max()), "k": k, "problems": len(per_problem),
        "avg_at_k": float(avg_at_k(n, c)), "pass_at_k": float(np.mean(pass_each)),
        "avg_ci": list(bootstrap_ci(avg_each, seed=seed)), "pass_ci": list(bootstrap_ci(pass_each, seed=seed)),
        "per_problem": [[int(a), int(b)] for a, b in zip(n, c)],
    }


def evaluate(sampler: RolloutSampler, task: Task, sampling: SamplingParams, n: int, max_problems: int,
             seed: int, timeout_s: float) -> dict[str, dict[str, Any]]:
    """Sample n responses per benchmark problem and score them. Uses its own generator so an
    eval never moves the training RNG (exact resume). Adds an 'overall' row (all problems pooled);
    {} for a task without benchmarks."""
    gen = torch.Generator(device=sampler.device).manual_seed(seed)
    results, pooled = {}, []
    for name, problems in task.benchmarks().items():
        problems = problems[:max_problems]
        rollouts = sampler.generate([task.encode_prompt(p) for p in problems], n, sampling, gen)
        rewards, _ = score_batch(task, [task.tokenizer.decode(r.response_ids) for r in rollouts],
                                 [problems[r.prompt_index] for r in rollouts], timeout_s)
        correct = np.zeros(len(problems), dtype=int)
        for r, ok in zip(rollouts, is_correct(rewards)):
            correct[r.prompt_index] += int(ok)
        per_problem = [(n, int(c)) for c in correct]
        results[name] = summarize(per_problem, n, seed)
        pooled += per_problem
    if not results:
        return {}  # a task with no held-out sets (the strata task: scripted rewards, nothing to measure)
    results["overall"] = summarize(pooled, n, seed)
    results["overall"]["avg_at_k_macro"] = float(np.mean([v["avg_at_k"] for k, v in results.items() if k != "overall"]))
    return results
