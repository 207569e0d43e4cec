"""GET /api/compare/groups: seed groups side by side (issue 6; docs/comparisons.md).

Per group: every /compare number as mean ± Student-t CI across its seeds; ratios against the
baseline group computed per seed pair and summarised; and per benchmark a paired test
against the baseline over the problems both evaluated (the paper's Table 1 "Total (P-value)"
is the ``overall`` row). The statistics are trainer.core.stats (numpy/scipy, no torch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from backend.db.metrics import latest_evals
from backend.db.models import EvalResult
from backend.db.models import Run
from backend.services.compare import ADDITIVE_KEYS, COMPARE_KEYS, metric_aggregates
from backend.services.groups import Group, seed_pairs
from trainer.core.stats import mean_ci, paired_diff_ci, paired_permutation_test, paired_ratios, problem_scores

EVAL_METRICS = ("avg_at_k", "pass_at_k")
TEST_NAME = "paired sign-flip permutation over problems"


def run_numbers(session: Session, run: Run) -> dict[str, Any]:
    """steps, per-step means and totals of one run (the /compare keys; no savings keys)."""
    return metric_aggregates(session, run.id, COMPARE_KEYS)


def common_k(evals: Mapping[int, Mapping[str, EvalResult]]) -> int | None:
    """The k every compared evaluation supports: the smallest stored k."""
    ks = [e.k for per_run in evals.values() for e in per_run.values() if e.k]
    return min(ks) if ks else None


def eval_value(ev: EvalResult, metric: str, k: int | None) -> float | None:
    """Avg@k / Pass@k of one evaluation, recomputed at the common k from (n, c) when stored."""
    if ev.per_problem and k:
        return float(np.mean(problem_scores(ev.per_problem, metric, k)))
    return getattr(ev, metric)


def group_numbers(g: Group, stats: Mapping[int, Mapping[str, Any]], evals: Mapping[int, Mapping[str, EvalResult]],
                  k: int | None, alpha: float) -> dict[str, Any]:
    """steps, per-step means, totals and final evals of one group as mean_ci dicts."""
    runs = [stats[i] for i in g.run_ids]
    out: dict[str, Any] = {
        "steps": mean_ci([s["steps"] for s in runs], alpha),
        "mean": {key: mean_ci([s["mean"][key] for s in runs], alpha) for key in COMPARE_KEYS},
        "total": {key: mean_ci([s["total"][key] for s in runs], alpha) for key in ADDITIVE_KEYS},
        "evals": {},
    }
    for bench in sorted({b for i in g.run_ids for b in evals[i]}):
        evs = [evals[i][bench] for i in g.run_ids if bench in evals[i]]
        out["evals"][bench] = {
            "k": k, "n": max((e.n or 0) for e in evs), "problems": min(len(e.per_problem or []) for e in evs),
            **{m: mean_ci([eval_value(e, m, k) for e in evs], alpha) for m in EVAL_METRICS},
        }
    return out


def _ratio_stat(pairs: Sequence[tuple[Any, Any]], values: Sequence[tuple[float | None, float | None]], alpha: float) -> dict[str, Any]:
    summary = paired_ratios(values, alpha)
    ratios = summary.pop("ratios")
    summary["pairs"] = [{"seed": r.config.get("seed"), "run_id": r.id, "baseline_run_id": b.id, "ratio": q}
                        for (r, b), q in zip(pairs, ratios)]
    return summary


def group_ratios(g: Group, base: Group, stats: Mapping[int, Mapping[str, Any]],
                 evals: Mapping[int, Mapping[str, EvalResult]], k: int | None, alpha: float) -> dict[str, Any]:
    """Every number divided by the baseline's, one ratio per seed pair (:func:`seed_pairs`)."""
    pairs = seed_pairs(g, base)

    def of(part: str, key: str) -> dict[str, Any]:
        return _ratio_stat(pairs, [(stats[r.id][part][key], stats[b.id][part][key]) for r, b in pairs], alpha)

    def ev(run_id: int, bench: str, metric: str) -> float | None:
        e = evals[run_id].get(bench)
        return None if e is None else eval_value(e, metric, k)

    benches = sorted({b for r, _ in pairs for b in evals[r.id]})
    return {
        "mean": {key: of("mean", key) for key in COMPARE_KEYS},
        "total": {key: of("total", key) for key in ADDITIVE_KEYS},
        "evals": {bench: {m: _ratio_stat(pairs, [(ev(r.id, bench, m), ev(b.id, bench, m)) for r, b in pairs], alpha)
                          for m in EVAL_METRICS} for bench in benches},
    }


def score_matrix(g: Group, evals: Mapping[int, Mapping[str, EvalResult]], bench: str, metric: str, k: int) -> list[np.ndarray]:
    """Per run of the group that evaluated ``bench`` with per-problem counts: its problem scores."""
    return [problem_scores(evals[i][bench].per_problem, metric, k)
            for i in g.run_ids if bench in evals[i] and evals[i][bench].per_problem]


def significance_row(a: list[np.ndarray], b: list[np.ndarray], alpha: float) -> dict[str, Any] | None:
    """Paired test of group a vs group b on the problems both evaluated (the common prefix:
    every run evaluates the first ``eval_problems`` of a fixed benchmark). None if a side is empty."""
    if not a or not b:
        return None
    p = min(len(x) for x in a + b)
    if p == 0:
        return None
    A, B = np.stack([x[:p] for x in a]), np.stack([x[:p] for x in b])
    mean_a, mean_b = A.mean(axis=0), B.mean(axis=0)
    lo, hi = paired_diff_ci(A, B, alpha)
    return {"diff": float(np.mean(mean_a - mean_b)), "ci": [lo, hi], "p_value": paired_permutation_test(mean_a, mean_b),
            "problems": p, "seeds": [len(a), len(b)], "test": TEST_NAME}


def significance(groups: Sequence[Group], base: Group, evals: Mapping[int, Mapping[str, EvalResult]],
                 k: int | None, alpha: float) -> dict[str, list[dict[str, Any]]]:
    """{benchmark: [one row per (non-baseline group, metric)]}."""
    if not k:
        return {}
    benches = sorted({b for per_run in evals.values() for b in per_run})
    out: dict[str, list[dict[str, Any]]] = {}
    for bench in benches:
        rows = []
        for g in groups:
            if g.key == base.key:
                continue
            for metric in EVAL_METRICS:
                row = significance_row(score_matrix(g, evals, bench, metric, k), score_matrix(base, evals, bench, metric, k), alpha)
                if row:
                    rows.append({"group": g.key, "baseline": base.key, "metric": metric, "k": k, **row})
        if rows:
            out[bench] = rows
    return out


def compare_groups(session: Session, groups: Sequence[Group], baseline_key: str, alpha: float = 0.05) -> dict[str, Any]:
    """The whole /compare/groups answer (see docs/api.md)."""
    runs = [r for g in groups for r in g.runs]
    stats = {r.id: run_numbers(session, r) for r in runs}
    evals = {r.id: latest_evals(session, r.id) for r in runs}
    k = common_k(evals)
    base = next(g for g in groups if g.key == baseline_key)
    out_groups = [{
        "key": g.key, "label": g.label, "method": g.method, "run_ids": g.run_ids, "seeds": g.seeds,
        **group_numbers(g, stats, evals, k, alpha),
        "ratios": group_ratios(g, base, stats, evals, k, alpha),
    } for g in groups]
    return {"baseline": base.key, "alpha": alpha, "k": k, "groups": out_groups,
            "significance": significance(groups, base, evals, k, alpha)}
