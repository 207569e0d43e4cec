"""Seed groups' compute to reach fractions of the baseline group's accuracy gain, paired by seed."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from backend.schemas.seed_stats import RatioStatPublic, StatPublic


class ReachTargetStatPublic(BaseModel):
    fraction: float
    accuracy: StatPublic


class ReachCostRatioStatPublic(BaseModel):
    flops: RatioStatPublic
    seconds: RatioStatPublic
    rollouts: RatioStatPublic | None = None
    tokens: RatioStatPublic | None = None


class ReachSeedPublic(BaseModel):
    """One seed pair's result at one target."""

    seed: int | None
    run_id: int
    baseline_run_id: int
    reached: bool
    step: int | None
    flops: float | None
    seconds: float | None
    rollouts: float | None = None
    tokens: float | None = None


class GroupReachTargetPublic(BaseModel):
    fraction: float
    accuracy: StatPublic = Field(description="The target accuracy across the seed pairs (each seed's baseline sets its own).")
    reached: int = Field(description="Seed pairs whose group run reached the target.")
    of: int = Field(description="Seed pairs with a target ('not reached (of - reached / of seeds)').")
    step: StatPublic = Field(description="First eval step at the target, over the seeds that reached it.")
    flops: StatPublic = Field(description="Cumulative training FLOPs there, over the seeds that reached it.")
    seconds: StatPublic = Field(description="Cumulative training seconds there (evaluation excluded), over the seeds that reached it.")
    rollouts: StatPublic | None = Field(None, description="Cumulative rollouts generated there, over the seeds that reached it.")
    tokens: StatPublic | None = Field(None, description="Cumulative response tokens generated there, over the seeds that "
                                      "reached it.")
    ratio: ReachCostRatioStatPublic = Field(description="This group / the baseline group at equal accuracy, per seed pair.")
    seeds: list[ReachSeedPublic]


class ReachSkipPublic(BaseModel):
    seed: int | None
    run_id: int
    baseline_run_id: int
    reason: str


class GroupReachPublic(BaseModel):
    key: str
    label: str
    method: str
    pairs: int = Field(description="Runs paired by seed with the baseline group.")
    usable: int = Field(description="Pairs whose baseline run gives targets (a step-0 evaluation and a gain).")
    unpaired_run_ids: list[int] = Field(description="Runs without a baseline run of their seed (left out).")
    reason: str | None = Field(description="Why the group has no targets; null when it has.")
    skipped: list[ReachSkipPublic] = Field(description="Seed pairs left out, with why.")
    targets: list[GroupReachTargetPublic]


class GroupCompareReachPublic(BaseModel):
    """Compute to reach fractions of the baseline group's accuracy gain, paired by seed (docs/comparisons.md)."""

    metric: Literal["avg_at_k"]
    benchmark: str = Field(description="'overall': every benchmark's problems pooled.")
    window: int = Field(description="Curves are smoothed by a trailing mean over this many evals; final = mean of the last this many.")
    fractions: list[float]
    baseline: str = Field(description="Key of the baseline group.")
    base: StatPublic = Field(description="The baseline runs' step-0 evaluations, across seeds.")
    final: StatPublic = Field(description="Mean of each baseline run's last `window` evaluations, across seeds.")
    gain: StatPublic = Field(description="final - base, across seeds.")
    targets: list[ReachTargetStatPublic] = Field(description="Target accuracies across the baseline's seeds.")
    reason: str | None = Field(description="Why the baseline group gives no targets; null when it does.")
    groups: list[GroupReachPublic]
