"""Compute to reach the same accuracy: the ``reach`` block of GET /api/compare (per run) and of
GET /api/compare/groups (per seed group, paired by seed), docs/comparisons.md.

The paper's claim is "less training compute at equal accuracy". :mod:`trainer.core.reach`
measures it (targets at fractions of the baseline's gain over the step-0 eval, curves smoothed
over a few evals, "not reached" kept); this module feeds it from the store and shapes the
answer. One :class:`ReachCurve` per run: the held-out Avg@k pooled over every benchmark
(``overall``) at each eval step, and the cumulative training FLOPs and seconds at that step,
read on exactly the axes of GET /compare/curves (:func:`axis_at_steps`), so the table and the
headline chart agree to the digit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.orm import Session

from backend.db.metrics import eval_values, read_step_metrics
from backend.db.models import Run
from backend.services.group_curves import X_KEYS, axis_at_steps
from backend.services.groups import Group, seed_pairs
import common.metric_keys as mk
from trainer.core.reach import (COSTS, FRACTIONS, WINDOW, ReachCurve, base_accuracy, cumulative, reach,
                                reach_across_seeds)
from trainer.core.stats import mean_ci

BENCHMARK = mk.OVERALL
METRIC = mk.AVG_AT_K


COUNT_KEYS = {"rollouts": mk.ROLLOUTS_GENERATED, "tokens": mk.TOKENS_GENERATED}


def reach_curve(session: Session, run: Run) -> ReachCurve:
    """One run's held-out ``overall`` Avg@k per eval step, with its cumulative training FLOPs
    (running sum of ``flops/total``), seconds (``time/elapsed_s``), rollouts and response tokens
    generated at those steps (a run that never logged a count has no cost on that axis)."""
    steps, values = eval_values(session, run.id, BENCHMARK, METRIC)
    cols = read_step_metrics(session, run.id, [*X_KEYS, *COUNT_KEYS.values()])
    counts = {name: cumulative(cols.steps, cols.series[key]) if any(v is not None for v in cols.series[key]) else {}
              for name, key in COUNT_KEYS.items()}
    return ReachCurve(steps, values, {"flops": axis_at_steps(cols, "flops"), "seconds": axis_at_steps(cols, "time"),
                                      **counts})


def _header(window: int = WINDOW) -> dict[str, Any]:
    return {"metric": METRIC, "benchmark": BENCHMARK, "window": window, "fractions": list(FRACTIONS)}


# ---------------------------------------------------------------- runs (GET /compare)


def run_reach(curves: Mapping[int, ReachCurve], baseline_id: int) -> dict[str, Any]:
    """The per-run block: :func:`reach` over the compared runs (named by run id) against
    ``baseline_id``; each run lists, per target, whether and where it first reached it and its
    ratio to the baseline's cost there. With no targets (``reason`` says why) the lists are empty."""
    r = reach({str(i): c for i, c in curves.items()}, baseline=str(baseline_id))
    runs = []
    for i, c in curves.items():
        rows = [{**row, "ratio": {cost: ratio[cost] for cost in COSTS}}
                for row, ratio in zip(r["runs"][str(i)], r["ratios"][str(i)])]
        runs.append({"run_id": i, "base": base_accuracy(c), "evals": len(c.eval_steps), "targets": rows})
    return {**_header(r["window"]), "baseline_run_id": baseline_id, "base": r["base"], "final": r["final"],
            "gain": r["gain"], "targets": r["targets"], "reason": r.get("reason"), "runs": runs}


def compare_reach(session: Session, runs: Sequence[Run], baseline_id: int) -> dict[str, Any]:
    """``reach`` of GET /compare."""
    return run_reach({r.id: reach_curve(session, r) for r in runs}, baseline_id)


# ---------------------------------------------------------------- seed groups (GET /compare/groups)


def _pair(run: Run, base: Run) -> dict[str, Any]:
    return {"seed": run.config.get("seed"), "run_id": run.id, "baseline_run_id": base.id}


def _label_pairs(pairs: Sequence[tuple[Run, Run]], summary: Mapping[str, Any]) -> dict[str, Any]:
    """A :func:`reach_across_seeds` ratio summary with each per-seed ratio labelled by its seed
    pair (as /compare/groups' ratios), instead of a bare list."""
    out = {k: v for k, v in summary.items() if k != "ratios"}
    out["pairs"] = [{**_pair(r, b), "ratio": q} for (r, b), q in zip(pairs, summary["ratios"])]
    return out


def group_targets(pairs: Sequence[tuple[Run, Run]], per_seed: Sequence[Mapping[str, Any]], name: str, baseline: str,
                  alpha: float) -> list[dict[str, Any]]:
    """Per target: target accuracy, reached count, step / FLOPs / seconds (mean ± t CI over the
    seeds that reached), the ratio to the baseline at equal accuracy paired by seed, and every
    seed's own result. ``pairs[i]`` produced ``per_seed[i]``; all of them have targets."""
    summary = reach_across_seeds(per_seed, baseline, alpha)
    out = []
    for i, row in enumerate(summary["runs"][name]):
        mine = [r["runs"][name][i] for r in per_seed]
        out.append({
            "fraction": row["fraction"], "accuracy": mean_ci([r["targets"][i]["accuracy"] for r in per_seed], alpha),
            "reached": row["reached"], "of": row["of"], **{k: row[k] for k in ("step", *COSTS)},
            "ratio": {c: _label_pairs(pairs, summary["ratios"][name][i][c]) for c in COSTS},
            "seeds": [{**_pair(r, b), **{k: m[k] for k in ("reached", "step", *COSTS)}} for (r, b), m in zip(pairs, mine)],
        })
    return out


def one_group(g: Group, base: Group, curves: Mapping[int, ReachCurve], alpha: float) -> dict[str, Any]:
    """One group against the baseline group: :func:`reach` per seed pair (:func:`seed_pairs`,
    the baseline seed's run as reference), then across seeds. Pairs whose baseline run gives no
    targets (no step-0 eval, no gain) are listed in ``skipped`` with the reason."""
    pairs = seed_pairs(g, base)
    paired = {r.id for r, _ in pairs}
    per_seed = [reach({g.key: curves[r.id], base.key: curves[b.id]}, baseline=base.key) for r, b in pairs]
    usable = [(p, res) for p, res in zip(pairs, per_seed) if res["targets"]]
    out: dict[str, Any] = {
        "key": g.key, "label": g.label, "method": g.method, "pairs": len(pairs), "usable": len(usable),
        "unpaired_run_ids": [r.id for r in g.runs if r.id not in paired], "reason": None,
        "skipped": [{**_pair(r, b), "reason": res.get("reason") or ""} for (r, b), res in zip(pairs, per_seed) if not res["targets"]],
        "targets": [],
    }
    if not pairs:
        out["reason"] = "no run shares a seed with the baseline group"
    elif not usable:
        out["reason"] = "; ".join(sorted({s["reason"] for s in out["skipped"]}))
    else:
        out["targets"] = group_targets([p for p, _ in usable], [res for _, res in usable], g.key, base.key, alpha)
    return out


def groups_reach(curves: Mapping[int, ReachCurve], groups: Sequence[Group], base: Group, alpha: float = 0.05) -> dict[str, Any]:
    """The per-group block: the baseline group's base / final / gain and target accuracies
    across its seeds, and per group :func:`one_group`."""
    own = [reach({base.key: curves[r.id]}, baseline=base.key) for r in base.runs]
    usable = [r for r in own if r["targets"]]
    reason = None if usable else "; ".join(sorted({r.get("reason") or "" for r in own})) or "the baseline group has no runs"
    return {
        **_header(), "baseline": base.key,
        **{k: mean_ci([r[k] for r in own], alpha) for k in ("base", "final", "gain")},
        "targets": [{"fraction": f, "accuracy": mean_ci([r["targets"][i]["accuracy"] for r in usable], alpha)}
                    for i, f in enumerate(FRACTIONS)] if usable else [],
        "reason": reason,
        "groups": [one_group(g, base, curves, alpha) for g in groups],
    }


def compare_groups_reach(session: Session, groups: Sequence[Group], base: Group, alpha: float = 0.05) -> dict[str, Any]:
    """``reach`` of GET /compare/groups."""
    curves = {r.id: reach_curve(session, r) for g in groups for r in g.runs}
    return groups_reach(curves, groups, base, alpha)
