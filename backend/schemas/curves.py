"""Seed groups' curves: mean and CI bands over step, FLOPs or time (/api/compare/curves)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class BandPublic(BaseModel):
    x: list[float]
    mean: list[float | None]
    lo: list[float | None]
    hi: list[float | None]
    n: list[int] = Field(description="Seeds covering each x.")


class GroupCurvesEntry(BaseModel):
    key: str
    label: str
    method: str
    run_ids: list[int]
    curves: dict[str, BandPublic] = Field(description=(
        "Per requested key. Step metrics: on a grid over the axis. Eval keys (eval/<benchmark>/<metric>): at the x of the "
        "runs' eval steps (evenly spaced when there are more than `points` of them)."))


class GroupCurvesPublic(BaseModel):
    x: Literal["step", "flops", "time"]
    alpha: float
    smooth: int = Field(description="Evaluations averaged per point of eval keys (trailing mean, per run).")
    groups: list[GroupCurvesEntry]
