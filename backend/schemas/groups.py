"""Comparing seed groups (runs of one config, different seeds): per-group stats, significance tests, the answer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from backend.schemas.group_reach import GroupCompareReachPublic
from backend.schemas.seed_stats import RatioStatPublic, StatPublic


class GroupEvalPublic(BaseModel):
    k: int | None = Field(description="The common k: the smallest eval k among the compared runs.")
    n: int = Field(description="Samples per problem.")
    problems: int
    steps: list[int] = Field(description="The step of each run's evaluation (a running seed may lag).")
    avg_at_k: StatPublic
    pass_at_k: StatPublic


class GroupRatiosPublic(BaseModel):
    mean: dict[str, RatioStatPublic]
    total: dict[str, RatioStatPublic]
    evals: dict[str, dict[str, RatioStatPublic]]


class GroupPublic(BaseModel):
    key: str = Field(description="Hash of the config without seed and name.")
    label: str = Field(description="Method, plus the config fields that set the group apart from its method's other groups.")
    method: str
    run_ids: list[int]
    seeds: list[int | None]
    steps: StatPublic
    mean: dict[str, StatPublic] = Field(description="Per-step means (as /compare), across seeds.")
    total: dict[str, StatPublic] = Field(description="Per-run totals of the additive metrics, across seeds.")
    evals: dict[str, GroupEvalPublic] = Field(description="Last evaluation per benchmark ('overall' pools them).")
    ratios: GroupRatiosPublic


class SignificancePublic(BaseModel):
    group: str
    baseline: str
    metric: Literal["avg_at_k", "pass_at_k"]
    k: int
    diff: float = Field(description="Group minus baseline: mean over problems of the seed-averaged per-problem scores.")
    ci: list[float] = Field(description="1-alpha two-level bootstrap CI of diff (problems and seeds resampled).")
    p_value: float = Field(description="Two-sided paired sign-flip permutation test over problems.")
    problems: int
    seeds: list[int] = Field(description="Runs averaged on each side [group, baseline].")
    test: str


class GroupComparePublic(BaseModel):
    baseline: str = Field(description="Key of the baseline group.")
    alpha: float
    k: int | None
    groups: list[GroupPublic]
    significance: dict[str, list[SignificancePublic]] = Field(description="Per benchmark, one row per (group, metric).")
    reach: GroupCompareReachPublic = Field(description="Compute (FLOPs, training seconds, rollouts and tokens generated) to "
                                          "reach the baseline group's accuracy.")
