"""Compute to reach the same accuracy: the paper's headline ("~2x less training compute at
equal accuracy", arXiv 2602.14338 §5.2, Fig. 1), measured so that evaluation noise cannot
decide it.

The paper compares per-step cost at matched final accuracy. Near a shared ceiling one eval
of a policy moves by about as much as the methods differ, so "the first step at which
method M's eval beats the baseline's final eval" is decided by noise. Instead:

* the baseline's **final** accuracy is the mean of its last ``window`` evals;
* a **target** is the base plus a fraction f of the baseline's gain:
  ``target_f = base + f * (final - base)`` for f in 50%, 75%, 90%, 100%;
* every curve is **smoothed** by a trailing mean over ``window`` evals (fewer at the start),
  so the baseline's last smoothed point is its final and it always reaches 100%;
* a method's **compute to reach** f is its cumulative training FLOPs and seconds (evaluation
  excluded), and the rollouts and response tokens it generated (Pilot-Commit's "rollouts to
  target" view), at the first eval whose smoothed accuracy is >= target_f; "not reached" is a
  result, reported as ``None`` with ``reached: False``, never dropped;
* the **ratio at equal accuracy** is method / baseline of those costs, per seed.

Pure numpy; the backend imports this module without torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

FRACTIONS: tuple[float, ...] = (0.5, 0.75, 0.9, 1.0)
WINDOW = 3
# cumulative training FLOPs, seconds, rollouts generated, response tokens generated
COSTS: tuple[str, ...] = ("flops", "seconds", "rollouts", "tokens")


@dataclass(frozen=True)
class ReachCurve:
    """One run's held-out accuracy at its eval steps, and its cumulative costs after each step.

    ``costs[name][step]`` is the cost of steps 1..step (0 at step 0); an eval step missing from
    a cost map has an unknown cost (reported as None)."""

    eval_steps: Sequence[int]
    values: Sequence[float]
    costs: Mapping[str, Mapping[int, float]] = field(default_factory=dict)


def smoothed(values: Sequence[float], window: int = WINDOW) -> np.ndarray:
    """Trailing mean over the last ``window`` values (over fewer at the start)."""
    v = np.asarray(values, dtype=float)
    c = np.concatenate([[0.0], np.cumsum(v)])
    i = np.arange(1, v.size + 1)
    lo = np.maximum(0, i - window)
    return (c[i] - c[lo]) / (i - lo)


def final_accuracy(values: Sequence[float], window: int = WINDOW) -> float | None:
    """Mean of the last ``window`` evals (a run's final accuracy, robust to one noisy eval)."""
    return float(np.mean(values[-window:])) if len(values) else None


def targets(base: float, final: float, fractions: Sequence[float] = FRACTIONS) -> list[float]:
    """``base + f * (final - base)`` for each fraction f of the baseline's gain."""
    return [base + f * (final - base) for f in fractions]


def first_reach(eval_steps: Sequence[int], values: Sequence[float], target: float, window: int = WINDOW) -> int | None:
    """The first eval step whose smoothed accuracy is >= ``target`` (None: never)."""
    hits = np.flatnonzero(smoothed(values, window) >= target - 1e-12)
    return int(eval_steps[hits[0]]) if hits.size else None


def base_accuracy(curve: ReachCurve) -> float | None:
    """The eval at step 0 (before any update), or None when the run has none."""
    return next((float(v) for s, v in zip(curve.eval_steps, curve.values) if s == 0), None)


def reach(curves: Mapping[str, ReachCurve], baseline: str, base: float | None = None,
          fractions: Sequence[float] = FRACTIONS, window: int = WINDOW) -> dict[str, Any]:
    """Compute to reach fractions of the baseline's gain, for every curve of one seed.

    ``base`` defaults to the baseline's step-0 eval. Returns {"baseline", "base", "final", "gain", "window",
    "targets": [{"fraction", "accuracy"}], "runs": {name: [{"fraction", "accuracy", "reached",
    "step", *COSTS}]}, "ratios": {name: [{"fraction", *COSTS}]}} where
    ratios are name / baseline (None where either did not reach or a cost is unknown). With no
    base, or a baseline that did not improve on it, "targets" is empty and "reason" says why."""
    ref = curves[baseline]
    base = base_accuracy(ref) if base is None else base
    final = final_accuracy(ref.values, window)
    out: dict[str, Any] = {"baseline": baseline, "base": base, "final": final, "gain": None, "window": window, "targets": [],
                           "runs": {name: [] for name in curves}, "ratios": {name: [] for name in curves}}
    if base is None or final is None:
        return {**out, "reason": "no step-0 evaluation of the base" if base is None else "the baseline has no evaluation"}
    out["gain"] = final - base
    if final <= base:
        return {**out, "reason": "the baseline did not improve on the base"}
    out["targets"] = [{"fraction": f, "accuracy": t} for f, t in zip(fractions, targets(base, final, fractions))]
    for name, curve in curves.items():
        for tgt in out["targets"]:
            step = first_reach(curve.eval_steps, curve.values, tgt["accuracy"], window)
            costs = {c: None if step is None else curve.costs.get(c, {}).get(step) for c in COSTS}
            out["runs"][name].append({**tgt, "reached": step is not None, "step": step, **costs})
    for name in curves:
        out["ratios"][name] = [
            {"fraction": mine["fraction"], **{c: _ratio(mine[c], theirs[c]) for c in COSTS}}
            for mine, theirs in zip(out["runs"][name], out["runs"][baseline])]
    return out


def _ratio(value: float | None, base: float | None) -> float | None:
    return None if value is None or base is None or base <= 0 else float(value) / float(base)


def cumulative(steps: Sequence[int], per_step: Sequence[float | None]) -> dict[int, float]:
    """{step: sum of per_step up to and including it}, with {0: 0.0}. A missing value (None)
    adds nothing: its cost is unknown, not free, but skipping it keeps the sum monotone."""
    out, total = {0: 0.0}, 0.0
    for s, v in sorted(zip(steps, per_step)):
        total += 0.0 if v is None else float(v)
        out[int(s)] = total
    return out


def reach_across_seeds(per_seed: Sequence[Mapping[str, Any]], baseline: str, alpha: float = 0.05) -> dict[str, Any]:
    """Summarise :func:`reach` results of several seeds (one per seed, same run names; the
    name ``baseline`` is the reference). Per name and fraction: how many seeds reached, and the
    mean with a Student-t CI of the step and each cost over the seeds that reached; per name,
    the ratio to the baseline paired by seed (geometric mean with a log-scale t interval, as
    :func:`trainer.core.stats.paired_ratios`), with the per-seed ratios (None: not reached)."""
    from trainer.core.stats import mean_ci, paired_ratios

    usable = [r for r in per_seed if r["targets"]]
    out: dict[str, Any] = {"baseline": baseline, "seeds": len(per_seed), "usable_seeds": len(usable), "window": WINDOW,
                           **{k: mean_ci([r[k] for r in per_seed], alpha) for k in ("base", "final", "gain")},
                           "fractions": [t["fraction"] for t in usable[0]["targets"]] if usable else [],
                           "runs": {}, "ratios": {}}
    if not usable:
        out["reason"] = "; ".join(sorted({r.get("reason", "") for r in per_seed})) or "no seeds"
        return out
    for name in usable[0]["runs"]:
        rows, ratios = [], []
        for i, frac in enumerate(out["fractions"]):
            mine = [r["runs"][name][i] for r in usable]
            theirs = [r["runs"][baseline][i] for r in usable]
            rows.append({"fraction": frac, "reached": sum(m["reached"] for m in mine), "of": len(mine),
                         **{k: mean_ci([m[k] for m in mine], alpha) for k in ("step", *COSTS)}})
            ratios.append({"fraction": frac, **{c: paired_ratios([(m[c], t[c]) for m, t in zip(mine, theirs)], alpha)
                                                for c in COSTS}})
        out["runs"][name], out["ratios"][name] = rows, ratios
    return out


def single_seed_reach(result: Mapping[str, Any]) -> dict[str, Any]:
    """One seed's :func:`reach` in the shape of :func:`reach_across_seeds` (n = 1, no intervals),
    so one renderer serves both."""
    return reach_across_seeds([result], result["baseline"])
