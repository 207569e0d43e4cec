"""Sweeps: the grid a POST /api/sweeps expands into runs, and a sweep with its runs' statuses."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from trainer.spec.config import Method, SharedConfig
from backend.schemas.base import ConfigBody, Label, Override, Priority, Tag, UtcDatetime
from backend.schemas.runs import RunPublic


class SweepCreate(ConfigBody):
    """POST /api/sweeps: one run per (override, method, seed)."""

    name: Label = "sweep"
    base: SharedConfig = Field(default_factory=SharedConfig, description="Config every run starts from; each run "
                               "keeps the method sections (aero, dapo, ...) its method reads.")
    methods: list[Method] = Field(min_length=1, max_length=8)
    seeds: list[Annotated[int, Field(ge=0, le=2**31 - 1)]] | None = Field(
        None, min_length=1, max_length=64, description="Default: [base.seed]."
    )
    overrides: list[Override] = Field(
        default_factory=lambda: [{}],
        min_length=1,
        max_length=64,
        description='Config changes, one grid row each: dotted keys ({"aero.n_explore": 4}) or nested dicts '
        '(each at most 8 levels deep and 256 keys and list items).',
    )
    tags: list[Tag] = Field(default_factory=list, max_length=32)
    priority: Priority = 0

    @classmethod
    def raw_configs(cls, data: dict[str, Any]) -> list[Any]:
        overrides = data.get("overrides")
        return [data.get("base"), *(overrides if isinstance(overrides, list) else [])]


class SweepSummary(BaseModel):
    id: int
    name: str
    created_at: UtcDatetime
    owner: str | None = Field(None, description="The submitting user; null for sweeps stored before users existed.")
    spec: dict[str, Any]
    status_counts: dict[str, int]
    run_count: int


class SweepPublic(SweepSummary):
    runs: list[RunPublic]


class SweepsPublic(BaseModel):
    data: list[SweepSummary]
    count: int = Field(description="All sweeps, before limit/offset.")
    limit: int
    offset: int
