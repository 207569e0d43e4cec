"""The rollout-allocation arena's leaderboard (`aero bench --methods ... --seeds 0,1,2`;
docs/comparisons.md "The rollout-allocation arena").

One row per method, all against the baseline method of the registry (GRPO) at the same
rollout budget per prompt (n_total) and the same FLOPs/token accounting:

- final Avg@k overall (mean of the last 3 evals) as mean ± Student-t CI across seeds, its
  difference to the baseline paired by seed, and the two-sided p-value of the paired sign-flip
  permutation over problems on the last evaluation (each problem's score averaged over seeds
  first, as GET /compare/groups does);
- FLOPs and seconds per step, rollouts generated and trained per step, the zero-accuracy ratio;
- FLOPs and seconds to reach 50/75/90% of the baseline's gain, per seed ("not reached" kept
  as None) and summarised over the seeds that reached.

The statistics are trainer.core.stats and trainer.core.reach; this module only arranges them.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

import common.metric_keys as mk
from trainer.core.reach import COSTS
from trainer.core.stats import mean_ci, paired_diff_ci, paired_permutation_test, problem_scores

FIELDS = ("flops_total", "step_s", "rollouts_generated", "rollouts_trained", "zero_acc_after_rescue", "waste_flops_frac")
FRACTIONS = (0.5, 0.75, 0.9)
TEST_NAME = "paired sign-flip permutation over problems (last evaluation, seeds averaged)"


def last_scores(report: dict[str, Any], method: str, bench: str = mk.OVERALL) -> np.ndarray | None:
    """Per-problem Avg@k of ``method``'s last evaluation of ``bench`` in one seed's report."""
    pp = (report["methods"][method].get("last_per_problem") or {}).get(bench)
    return problem_scores(pp, "avg_at_k", 1) if pp else None


def significance(reports: Sequence[dict[str, Any]], method: str, baseline: str, alpha: float = 0.05) -> dict[str, Any] | None:
    """Paired test of ``method`` against ``baseline`` over the problems every run evaluated (the
    first p of the fixed list); None when a run kept no per-problem counts."""
    a = [last_scores(r, method) for r in reports]
    b = [last_scores(r, baseline) for r in reports]
    if any(x is None for x in a + b):
        return None
    p = min(len(x) for x in a + b)  # type: ignore[arg-type]
    A, B = np.stack([x[:p] for x in a]), np.stack([x[:p] for x in b])  # type: ignore[index]
    lo, hi = paired_diff_ci(A, B, alpha)
    return {"diff": float(np.mean(A.mean(axis=0) - B.mean(axis=0))), "ci": [lo, hi],
            "p_value": paired_permutation_test(A.mean(axis=0), B.mean(axis=0)), "problems": p, "test": TEST_NAME}


def reach_rows(reports: Sequence[dict[str, Any]], method: str, alpha: float = 0.05) -> list[dict[str, Any]]:
    """Per target fraction: every seed's FLOPs, seconds, rollouts and tokens to reach it (None: not
    reached, or no target because the baseline did not improve), and their mean ± CI over the
    seeds that did."""
    out = []
    for frac in FRACTIONS:
        seeds = []
        for r in reports:
            rows = ((r.get("reach") or {}).get("runs") or {}).get(method) or []
            hit = next((x for x in rows if abs(x["fraction"] - frac) < 1e-9), None)
            seeds.append({"seed": r["meta"]["seed"], "reached": bool(hit and hit["reached"]),
                          **{c: hit.get(c) if hit else None for c in COSTS}})
        out.append({"fraction": frac, "reached": sum(s["reached"] for s in seeds), "of": len(seeds), "seeds": seeds,
                    **{c: mean_ci([s[c] for s in seeds], alpha) for c in COSTS}})
    return out


def leaderboard(reports: Sequence[dict[str, Any]], summary: dict[str, Any], baseline: str | None,
                alpha: float = 0.05) -> list[dict[str, Any]]:
    """One row per benched method (``summary`` is trainer.bench.seeds.summarize_seeds' answer
    without its leaderboard), in the order benched."""
    rows = []
    for m, s in summary["methods"].items():
        is_base = m == baseline
        pair = summary["ratios"].get(f"{m}/{baseline}") or {}
        rows.append({
            "method": m, "baseline": is_base, "final": s["final_avg_at_k"].get(mk.OVERALL),
            "diff": None if is_base else pair.get("final_diff"),
            "test": None if is_base or baseline is None else significance(reports, m, baseline, alpha),
            **{f: s[f] for f in FIELDS},
            "reach": reach_rows(reports, m, alpha),
        })
    return rows
