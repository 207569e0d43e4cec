"""A run's step metrics (columnar series) and its stored evaluations."""

from __future__ import annotations

from pydantic import BaseModel, Field

from backend.schemas.base import RunStatus


class MetricsPublic(BaseModel):
    """Columnar: ``series[key][i]`` is ``key`` at ``steps[i]`` (null when that step lacks it)."""

    run_id: int
    steps: list[int]
    series: dict[str, list[float | None]]
    stored_steps: int = Field(description="Steps stored in the requested range, before downsampling.")
    last_step: int | None = Field(description="Last stored step of the run (any range).")
    run_status: RunStatus


class EvalPublic(BaseModel):
    run_id: int
    step: int
    benchmark: str
    n: int | None = Field(description="Samples per problem.")
    k: int
    avg_at_k: float | None
    pass_at_k: float | None
    avg_ci: list[float | None]
    pass_ci: list[float | None]
    per_problem: list[list[int]] | None = Field(description="[[n, c], ...] per problem (omitted with per_problem=false).")


class EvalsPublic(BaseModel):
    data: list[EvalPublic]
    count: int
