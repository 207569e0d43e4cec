"""Comparing single runs against a baseline run: per-run stats, savings waterfalls, compute to reach its accuracy."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class RunStatsPublic(BaseModel):
    run_id: int
    name: str
    method: str
    status: str
    sweep_id: int | None
    seed: int | None
    steps: int
    mean: dict[str, float | None] = Field(description="Per-step means (time, FLOPs, rollouts, tokens, ratios).")
    total: dict[str, float | None] = Field(description="Sums over steps of the additive metrics.")
    savings_mean: dict[str, float | None]
    evals: dict[str, dict[str, Any]] = Field(description="Last evaluation per benchmark.")
    ratios: dict[str, Any] = Field(description="Each number divided by the baseline run's (null if undefined).")


class WaterfallPublic(BaseModel):
    source: Literal["counterfactual", "measured"]
    label: str
    run_id: int | None = None
    method: str | None = None
    sweep_id: int | None = None
    runs_per_method: dict[str, int] | None = None
    per_step: dict[str, dict[str, float | None]] | None = Field(
        description="unit -> {baseline, s1, s2, s3, final} with baseline - s1 - s2 - s3 = final."
    )


class WaterfallsPublic(BaseModel):
    counterfactual: list[WaterfallPublic]
    measured: list[WaterfallPublic]


class ReachTargetPublic(BaseModel):
    fraction: float = Field(description="Fraction of the baseline's gain over the base: 0.5, 0.75, 0.9 or 1.0.")
    accuracy: float = Field(description="The target: base + fraction x (final - base).")


class ReachCostRatioPublic(BaseModel):
    flops: float | None = Field(description="This run's FLOPs to reach the target / the baseline's (null: either did not reach).")
    seconds: float | None = Field(description="The same for training seconds.")
    rollouts: float | None = Field(None, description="The same for rollouts generated.")
    tokens: float | None = Field(None, description="The same for response tokens generated.")


class ReachResultPublic(BaseModel):
    """One run at one target."""

    fraction: float
    accuracy: float = Field(description="The target accuracy.")
    reached: bool = Field(description="False: the run's smoothed accuracy never reached the target ('not reached').")
    step: int | None = Field(description="First eval step whose smoothed accuracy >= the target (null: not reached).")
    flops: float | None = Field(description="Cumulative training FLOPs (running sum of flops/total) at that step.")
    seconds: float | None = Field(description="Cumulative training seconds (time/elapsed_s, evaluation excluded) at that step.")
    rollouts: float | None = Field(None, description="Cumulative rollouts generated (running sum of rollout/generated) "
                                   "at that step: the rollouts-to-target view.")
    tokens: float | None = Field(None, description="Cumulative response tokens generated (tokens/generated) at that step.")
    ratio: ReachCostRatioPublic = Field(description="Ratio to the baseline run at equal accuracy.")


class ReachRunPublic(BaseModel):
    run_id: int
    base: float | None = Field(description="This run's own step-0 evaluation (null when it has none).")
    evals: int = Field(description="Evaluations of the benchmark this run has stored.")
    targets: list[ReachResultPublic] = Field(description="One per target; empty when the block has a reason.")


class CompareReachPublic(BaseModel):
    """Compute to reach fractions of the baseline run's accuracy gain (docs/comparisons.md)."""

    metric: Literal["avg_at_k"]
    benchmark: str = Field(description="'overall': every benchmark's problems pooled.")
    window: int = Field(description="Curves are smoothed by a trailing mean over this many evals; final = mean of the last this many.")
    fractions: list[float]
    baseline_run_id: int
    base: float | None = Field(description="The baseline run's step-0 evaluation (before any update).")
    final: float | None = Field(description="Mean of the baseline run's last `window` evaluations.")
    gain: float | None = Field(description="final - base.")
    targets: list[ReachTargetPublic]
    reason: str | None = Field(description="Why there are no targets (no step-0 evaluation, no gain); null when there are.")
    runs: list[ReachRunPublic]


class ComparePublic(BaseModel):
    baseline: int
    runs: list[RunStatsPublic]
    waterfall: WaterfallsPublic
    reach: CompareReachPublic = Field(description="Compute (FLOPs, training seconds, rollouts and tokens generated) to reach the "
                                     "baseline's accuracy.")
