"""Side-by-side comparison of runs (GET /api/compare).

Per run, from its stored step metrics (docs/metrics.md):
  * ``mean``: per-step mean of every key in COMPARE_KEYS (time, FLOPs, rollouts, tokens,
    zero-accuracy and all-correct ratios, reward);
  * ``total``: sum over steps of the additive keys (time, FLOPs, rollouts, tokens);
  * ``evals``: the last evaluation of each benchmark (Avg@k, Pass@k);
and ``ratios``: each number divided by the baseline run's (None where either is missing or
the baseline is 0). Per-step means compare runs of different lengths fairly; totals answer
"what did the whole run cost".
The waterfall is in :mod:`backend.services.waterfall`; ``reach`` (compute to reach the
baseline's accuracy) in :mod:`backend.services.reach`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.metrics import latest_evals, series_aggregates
from backend.db.models import Run
from backend.services.reach import compare_reach
from backend.services.waterfall import LADDER, waterfalls
import common.metric_keys as mk
from trainer.methods.spec import baseline_method

ADDITIVE_KEYS: tuple[str, ...] = (
    mk.STEP_S, mk.ROLLOUT_S, mk.REWARD_S, mk.TRAIN_S,
    mk.FLOPS_ROLLOUT, mk.FLOPS_TRAIN, mk.FLOPS_TOTAL,
    mk.ROLLOUTS_GENERATED, mk.ROLLOUTS_TRAINED, mk.TOKENS_GENERATED, mk.TOKENS_TRAINED,
    mk.WASTE_ROLLOUTS, mk.WASTE_TOKENS, mk.WASTE_FLOPS,  # compute with no advantage signal: "total" is cumulative
)
RATIO_KEYS: tuple[str, ...] = (mk.ZERO_ACC_AFTER_EXPLORE, mk.ZERO_ACC_AFTER_RESCUE, mk.ALL_CORRECT_RATIO, mk.REWARD_MEAN,
                               mk.WASTE_FLOPS_FRAC)
SAVINGS_KEYS: tuple[str, ...] = mk.SAVINGS_KEYS + (mk.SAVINGS_GRPO_ROLLOUTS, mk.SAVINGS_GRPO_TOKENS)
COMPARE_KEYS: tuple[str, ...] = ADDITIVE_KEYS + RATIO_KEYS


def metric_aggregates(session: Session, run_id: int, keys: Sequence[str] = COMPARE_KEYS + SAVINGS_KEYS) -> dict[str, Any]:
    """{"steps": n, "mean": {key: mean}, "total": {key: sum}} over one run's steps (from the
    columnar copy of the step metrics). Missing keys give None."""
    return series_aggregates(session, run_id, keys)


def run_stats(session: Session, run: Run) -> dict[str, Any]:
    """Everything /compare reports about one run (before ratios)."""
    agg = metric_aggregates(session, run.id)
    evals = {
        b: {"step": e.step, "k": e.k, "n": e.n, "avg_at_k": e.avg_at_k, "pass_at_k": e.pass_at_k}
        for b, e in latest_evals(session, run.id).items()
    }
    return {
        "run_id": run.id, "name": run.name, "method": run.method, "status": run.status, "sweep_id": run.sweep_id,
        "seed": run.config.get("seed"), "steps": agg["steps"],
        "mean": {k: agg["mean"][k] for k in COMPARE_KEYS},
        "total": {k: agg["total"][k] for k in ADDITIVE_KEYS},
        "savings_mean": {k: agg["mean"][k] for k in SAVINGS_KEYS},
        "evals": evals,
    }


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base, or None when either is missing or base is 0."""
    if value is None or base is None or base == 0:
        return None
    return value / base


def ratios_against(stats: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """Ratios of one run's numbers to the baseline's: mean, total, steps and final evals."""
    evals = {}
    for bench, ev in stats["evals"].items():
        b = base["evals"].get(bench, {})
        evals[bench] = {m: ratio(ev.get(m), b.get(m)) for m in mk.EVAL_METRICS}
    return {
        "steps": ratio(stats["steps"], base["steps"]),
        "mean": {k: ratio(v, base["mean"].get(k)) for k, v in stats["mean"].items()},
        "total": {k: ratio(v, base["total"].get(k)) for k, v in stats["total"].items()},
        "evals": evals,
    }


def default_baseline(runs: Sequence[Run]) -> int:
    """The first run of the baseline method (trainer/methods/), else the first run."""
    base = baseline_method()
    return next((r.id for r in runs if r.method == base), runs[0].id)


def compare(stats: Sequence[Mapping[str, Any]], baseline_id: int) -> dict[str, Any]:
    """Attach ``ratios`` (against ``baseline_id``) to each run's stats."""
    base = next(s for s in stats if s["run_id"] == baseline_id)
    return {"baseline": baseline_id, "runs": [{**s, "ratios": ratios_against(s, base)} for s in stats]}


def ladder_means(session: Session, sweep_id: int) -> dict[str, list[dict[str, float | None]]]:
    """{method: [per-step mean metrics of each run with steps]} for the ablation-ladder methods
    of one sweep (input of the measured waterfall)."""
    out: dict[str, list[dict[str, float | None]]] = {m: [] for m in LADDER}
    runs = session.scalars(select(Run).where(Run.sweep_id == sweep_id, Run.method.in_(LADDER)).order_by(Run.id))
    for run in runs:
        agg = metric_aggregates(session, run.id, COMPARE_KEYS)
        if agg["steps"]:
            out[run.method].append(agg["mean"])
    return out


def compare_runs(session: Session, runs: Sequence[Run], baseline_id: int | None = None) -> dict[str, Any]:
    """The whole /compare answer: per-run stats with ratios against the baseline, the
    counterfactual and measured waterfalls (see backend.services.waterfall) and the compute
    each run needed to reach fractions of the baseline's accuracy gain (backend.services.reach)."""
    stats = [run_stats(session, r) for r in runs]
    out = compare(stats, baseline_id if baseline_id is not None else default_baseline(runs))
    sweeps = sorted({r.sweep_id for r in runs if r.sweep_id is not None})
    out["waterfall"] = waterfalls(stats, {sid: ladder_means(session, sid) for sid in sweeps})
    out["reach"] = compare_reach(session, runs, out["baseline"])
    return out
