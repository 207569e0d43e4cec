"""GET /api/compare/groups: seed groups side by side (issue 6; docs/comparisons.md).

Per group: every /compare number as mean ± Student-t CI across its seeds; ratios against the
baseline group computed per seed pair and summarised; and per benchmark a paired test
against the baseline over the problems both evaluated (the paper's Table 1 "Total (P-value)"
is the ``overall`` row); and the compute each group needs to reach fractions of the baseline
group's accuracy gain, paired by seed (``reach``, backend.services.reach). The statistics are
trainer.core.stats and trainer.core.reach (numpy/scipy, no torch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from backend.db.metrics import latest_evals
from backend.db.models import Run
from backend.services.compare import ADDITIVE_KEYS, COMPARE_KEYS, metric_aggregates
from backend.services.groups import Group, seed_pairs
from backend.services.reach import compare_groups_reach
import common.metric_keys as mk
from trainer.core.stats import mean_ci, paired_diff_ci, paired_permutation_test, paired_ratios, problem_scores

EVAL_METRICS = mk.EVAL_METRICS
TEST_NAME = "paired sign-flip permutation over problems"


def run_numbers(session: Session, run: Run) -> dict[str, Any]:
    """steps, per-step means and totals of one run (the /compare keys; no savings keys)."""
    return metric_aggregates(session, run.id, COMPARE_KEYS)


@dataclass(frozen=True)
class Eval:
    """One run's last evaluation of a benchmark, with per-problem counts only when they are valid."""

    step: int
    k: int
    n: int | None
    avg_at_k: float | None
    pass_at_k: float | None
    per_problem: list[list[int]] | None


def counts_ok(per_problem: Any) -> bool:
    """Stored (n, c) pairs usable for recomputation: non-empty, n >= 1, 0 <= c <= n."""
    try:
        return bool(per_problem) and all(n >= 1 and 0 <= c <= n for n, c in per_problem)
    except (TypeError, ValueError):
        return False


def load_evals(session: Session, run_id: int) -> dict[str, Eval]:
    """The last evaluation of each benchmark (a malformed per-problem list is ignored, not fatal)."""
    return {b: Eval(e.step, e.k, e.n, e.avg_at_k, e.pass_at_k, e.per_problem if counts_ok(e.per_problem) else None)
            for b, e in latest_evals(session, run_id).items()}


def common_k(evals: Mapping[int, Mapping[str, Eval]]) -> int | None:
    """The k every compared evaluation supports: the smallest stored k, capped by the smallest
    per-problem n (Pass@k needs k <= n)."""
    ks = [e.k for per_run in evals.values() for e in per_run.values() if e.k]
    ks += [min(n for n, _ in e.per_problem) for per_run in evals.values() for e in per_run.values() if e.per_problem]
    return min(ks) if ks else None


def eval_value(ev: Eval, metric: str, k: int | None) -> float | None:
    """Avg@k / Pass@k of one evaluation at the common k: recomputed from (n, c) when stored,
    else the stored value if it was computed at that k (Avg@k does not depend on k), else None."""
    if ev.per_problem and k:
        return float(np.mean(problem_scores(ev.per_problem, metric, k)))
    return getattr(ev, metric) if metric == "avg_at_k" or ev.k == k else None


def group_numbers(g: Group, stats: Mapping[int, Mapping[str, Any]], evals: Mapping[int, Mapping[str, Eval]],
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
            "steps": [e.step for e in evs],
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
                 evals: Mapping[int, Mapping[str, Eval]], k: int | None, alpha: float) -> dict[str, Any]:
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


def paired_scores(a_ids: Sequence[int], b_ids: Sequence[int], evals: Mapping[int, Mapping[str, Eval]], bench: str,
                  metric: str, k: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per-problem scores of each side's runs on the same problems: the first p problems of the
    benchmark, p the fewest any run evaluated (every run evaluates a prefix of a fixed list).
    "overall" is rebuilt from the benchmarks every run evaluated, each cut to its common prefix,
    so problem i is the same problem on both sides even when runs evaluated different counts
    (the stored pooled list would misalign). Runs without per-problem counts are left out."""
    a_ids = [i for i in a_ids if bench in evals[i] and evals[i][bench].per_problem]
    b_ids = [i for i in b_ids if bench in evals[i] and evals[i][bench].per_problem]
    ids = a_ids + b_ids
    if not a_ids or not b_ids:
        return [], []
    parts = [bench]
    if bench == mk.OVERALL:
        shared = set.intersection(*({b for b, e in evals[i].items() if b != mk.OVERALL and e.per_problem} for i in ids))
        parts = sorted(shared) or [mk.OVERALL]
    vecs: dict[int, list[np.ndarray]] = {i: [] for i in ids}
    for part in parts:
        p = min(len(evals[i][part].per_problem) for i in ids)
        for i in ids:
            vecs[i].append(problem_scores(evals[i][part].per_problem[:p], metric, k))
    return [np.concatenate(vecs[i]) for i in a_ids], [np.concatenate(vecs[i]) for i in b_ids]


def significance_row(a: list[np.ndarray], b: list[np.ndarray], alpha: float) -> dict[str, Any] | None:
    """Paired test of group a vs group b; a[i], b[j] score the same problems (:func:`paired_scores`).
    None if a side is empty."""
    if not a or not b or len(a[0]) == 0:
        return None
    A, B = np.stack(a), np.stack(b)
    p = A.shape[1]
    mean_a, mean_b = A.mean(axis=0), B.mean(axis=0)
    lo, hi = paired_diff_ci(A, B, alpha)
    return {"diff": float(np.mean(mean_a - mean_b)), "ci": [lo, hi], "p_value": paired_permutation_test(mean_a, mean_b),
            "problems": p, "seeds": [len(a), len(b)], "test": TEST_NAME}


def significance(groups: Sequence[Group], base: Group, evals: Mapping[int, Mapping[str, Eval]],
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
                row = significance_row(*paired_scores(g.run_ids, base.run_ids, evals, bench, metric, k), alpha)
                if row:
                    rows.append({"group": g.key, "baseline": base.key, "metric": metric, "k": k, **row})
        if rows:
            out[bench] = rows
    return out


def compare_groups(session: Session, groups: Sequence[Group], baseline_key: str, alpha: float = 0.05) -> dict[str, Any]:
    """The whole /compare/groups answer (see docs/api.md)."""
    runs = [r for g in groups for r in g.runs]
    stats = {r.id: run_numbers(session, r) for r in runs}
    evals = {r.id: load_evals(session, r.id) for r in runs}
    k = common_k(evals)
    base = next(g for g in groups if g.key == baseline_key)
    out_groups = [{
        "key": g.key, "label": g.label, "method": g.method, "run_ids": g.run_ids, "seeds": g.seeds,
        **group_numbers(g, stats, evals, k, alpha),
        "ratios": group_ratios(g, base, stats, evals, k, alpha),
    } for g in groups]
    return {"baseline": base.key, "alpha": alpha, "k": k, "groups": out_groups,
            "significance": significance(groups, base, evals, k, alpha),
            "reach": compare_groups_reach(session, groups, base, alpha)}
