"""Numbers across a seed group's runs: mean with a CI, and seed-paired ratios to the baseline group."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class StatPublic(BaseModel):
    """A number across a group's seeds: mean and Student-t CI (lo/hi null with fewer than 2 seeds)."""

    mean: float | None
    lo: float | None
    hi: float | None
    n: int = Field(description="Seeds with a value.")
    values: list[float] = Field(description="The per-seed values, in run order.")


class RatioPairPublic(BaseModel):
    seed: int | None
    run_id: int
    baseline_run_id: int
    ratio: float | None = Field(description="This run's value / its seed partner's in the baseline group.")


class RatioStatPublic(BaseModel):
    """Ratio to the baseline group, one per seed pair: geometric mean and a Student-t interval
    on log ratios (``scale`` "log"), or the arithmetic mean_ci when a ratio is <= 0 ("linear")."""

    mean: float | None
    lo: float | None
    hi: float | None
    n: int = Field(description="Seed pairs with a defined ratio.")
    values: list[float]
    scale: Literal["log", "linear"]
    pairs: list[RatioPairPublic]
