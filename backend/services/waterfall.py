"""Compute-savings waterfall of AERO's strategies against GRPO (paper §5.3 Fig. 8; metric keys in
docs/metrics.md "Counterfactual savings").

Every waterfall has the same shape per unit: ``baseline - s1 - s2 - s3 = final``, per step
(means over the run's steps), with units

    rollouts  trained rollouts        rollout/trained    savings/s*_rollouts
    tokens    trained tokens          tokens/trained     savings/s*_tokens
    flops     training FLOPs          flops/train        savings/s*_flops
    seconds   training seconds        time/train_s       savings/s*_s

Two sources, always labelled:

* ``counterfactual`` (one AERO-family run): the trainer logs, each step, what S1, S2 and S3
  saved against GRPO at the same budget (trainer/core/savings.py). ``final`` is what the run
  actually trained; ``baseline = final + the savings of the strategies the method uses``
  (aero-s1: S1; aero-s1s2: S1, S2; aero: all three). Savings of strategies the method does not
  use are reported as None.
* ``measured`` (ablation runs of one sweep: grpo, aero-s1, aero-s1s2, aero): the rungs are
  the runs' own per-step means (averaged over seeds), s1 = grpo - aero-s1,
  s2 = aero-s1 - aero-s1s2, s3 = aero-s1s2 - aero. It also has ``step_seconds``
  (time/step_s) and ``total_flops`` (flops/total), which include what rescue rounds cost in
  generation — the counterfactual cannot see that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import common.metric_keys as mk
from trainer.methods.spec import baseline_method, specs

UNITS: dict[str, tuple[str, str]] = {  # unit -> (actual metric key, savings key suffix)
    "rollouts": (mk.ROLLOUTS_TRAINED, "rollouts"),
    "tokens": (mk.TOKENS_TRAINED, "tokens"),
    "flops": (mk.FLOPS_TRAIN, "flops"),
    "seconds": (mk.TRAIN_S, "s"),
}
MEASURED_EXTRA_UNITS: dict[str, str] = {"step_seconds": mk.STEP_S, "total_flops": mk.FLOPS_TOTAL}
# Which of S1/S2/S3 each AERO-family method uses: its spec's ``aero`` (None for other methods).
STRATEGIES_OF: dict[str, tuple[bool, bool, bool]] = {s.name: s.aero.flags for s in specs()
                                                     if s.aero is not None and any(s.aero.flags)}
# The measured ladder: GRPO, then the AERO-family methods that add S1, S2 and S3 in turn
# (variants of another family, such as aero-mem, use all three but are not rungs of it).
_S1_ONLY = [s for s in specs() if s.aero is not None and s.aero.flags == (True, False, False)]  # the first rung
LADDER: tuple[str, ...] = (baseline_method(),) + tuple(
    s.name for k in (1, 2, 3) for s in specs()
    if _S1_ONLY and s.family == _S1_ONLY[0].family and s.aero is not None
    and s.aero.flags == (True,) * k + (False,) * (3 - k))


def counterfactual_waterfall(mean: Mapping[str, float | None], method: str) -> dict[str, dict[str, float | None]] | None:
    """Per-step counterfactual waterfall of one run from its mean metrics; None when the run
    logged no savings (GRPO, DAPO, or no steps yet)."""
    used = STRATEGIES_OF.get(method)
    if used is None:
        return None
    out: dict[str, dict[str, float | None]] = {}
    for unit, (key, suffix) in UNITS.items():
        final = mean.get(key)
        saved = [mean.get(f"savings/{s}_{suffix}") if on else None for s, on in zip(("s1", "s2", "s3"), used)]
        if final is None or all(v is None for v in saved):
            continue
        baseline = final + sum(v for v in saved if v is not None)
        out[unit] = {"baseline": baseline, "s1": saved[0], "s2": saved[1], "s3": saved[2], "final": final}
    return out or None


def mean_over_runs(means: Sequence[Mapping[str, float | None]], key: str) -> float | None:
    """Mean of one key over several runs (seeds), ignoring runs that lack it."""
    vals = [m[key] for m in means if m.get(key) is not None]
    return sum(vals) / len(vals) if vals else None


def measured_waterfall(means_by_method: Mapping[str, Sequence[Mapping[str, float | None]]]) -> dict[str, dict[str, float | None]] | None:
    """Per-step measured waterfall from the four ablation rungs ({method: [per-run mean metrics]}).
    None unless every rung of LADDER has at least one run."""
    if any(not means_by_method.get(m) for m in LADDER):
        return None
    keys = {unit: key for unit, (key, _) in UNITS.items()} | MEASURED_EXTRA_UNITS
    out: dict[str, dict[str, float | None]] = {}
    for unit, key in keys.items():
        rung = [mean_over_runs(means_by_method[m], key) for m in LADDER]
        if any(v is None for v in rung):
            continue
        out[unit] = {"baseline": rung[0], "s1": rung[0] - rung[1], "s2": rung[1] - rung[2], "s3": rung[2] - rung[3], "final": rung[3]}
    return out or None


def missing_rungs(methods_present: Sequence[str]) -> list[str]:
    return [m for m in LADDER if m not in set(methods_present)]


def waterfalls(stats: Sequence[Mapping[str, Any]], sweep_means: Mapping[int, Mapping[str, Sequence[Mapping[str, Any]]]]) -> dict[str, Any]:
    """Both waterfalls for a comparison.

    ``stats``: run_stats of the compared runs (their ``mean`` and ``savings_mean``).
    ``sweep_means``: {sweep_id: {method: [mean metrics of each run of that method]}} for the
    sweeps the compared runs belong to.
    """
    counterfactual = []
    for s in stats:
        wf = counterfactual_waterfall({**s["mean"], **s["savings_mean"]}, s["method"])
        if wf is not None:
            counterfactual.append({
                "source": "counterfactual", "run_id": s["run_id"], "method": s["method"],
                "label": f"counterfactual: savings/* metrics logged by run {s['run_id']} ({s['method']})",
                "per_step": wf,
            })
    measured = []
    for sweep_id, by_method in sweep_means.items():
        wf = measured_waterfall(by_method)
        missing = missing_rungs([m for m, v in by_method.items() if v])
        measured.append({
            "source": "measured", "sweep_id": sweep_id,
            "runs_per_method": {m: len(by_method.get(m, ())) for m in LADDER},
            "label": (f"measured: ablation runs of sweep {sweep_id} (grpo, aero-s1, aero-s1s2, aero; mean over seeds)"
                      if wf is not None else f"measured: unavailable for sweep {sweep_id}, missing {', '.join(missing)}"),
            "per_step": wf,
        })
    return {"counterfactual": counterfactual, "measured": measured}
