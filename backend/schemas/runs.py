"""Runs: the POST / PATCH bodies and the run as the API shows it (one, or a page of them)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field

from trainer.spec.config import RunConfig
from backend.schemas.base import ConfigBody, InputModel, Label, Notes, Priority, RunState, RunStatus, Tag, UtcDatetime


class RunCreate(ConfigBody):
    """POST /api/runs. ``config`` omitted = all defaults (AERO on the tiny preset)."""

    config: RunConfig = Field(default_factory=RunConfig)
    name: Label | None = Field(None, description="Display name; default: config.name, else '<method>-seed<seed>'.")
    tags: list[Tag] = Field(default_factory=list, max_length=32)
    notes: Notes = ""
    priority: Priority = 0

    @classmethod
    def raw_configs(cls, data: dict[str, Any]) -> list[Any]:
        return [data.get("config")]


class RunUpdate(InputModel):
    """PATCH /api/runs/{id}: replace tags and/or notes."""

    tags: list[Tag] | None = Field(None, max_length=32)
    notes: Notes | None = None


class RunPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    method: str
    engine: str
    status: RunStatus = Field(description="The stored status. A running run may still wait for its GPUs before its first "
                              "step: see state, waiting_for and waiting_since.")
    queue: str
    progress: float = Field(description="current_step / total_steps, 0..1.")
    current_step: int
    total_steps: int
    error: str | None
    created_at: UtcDatetime
    started_at: UtcDatetime | None
    finished_at: UtcDatetime | None
    worker: str | None
    heartbeat_at: UtcDatetime | None
    tags: list[str]
    notes: str
    sweep_id: int | None
    cancel_requested: bool
    attempts: int
    owner: str | None = Field(None, description="The submitting user; null for runs stored before users existed.")
    config: dict[str, Any]
    stop_reason: str | None = Field(None, description="The alert rule that stopped the run early (trainer/spec/alerts.py), "
                                    "if one did.")
    gpus: int = Field(0, description="GPUs the run holds while it trains (resources.gpus_per_node x nodes; logical "
                      "GPUs on device=cpu).")
    waiting_for: str | None = Field(None, description="What a running run waits for before its first step (its GPUs, "
                                    "while other runs hold them); null once placed.")
    waiting_since: UtcDatetime | None = Field(None, description="When the running run began to wait for its GPUs; "
                                              "null once placed, and whenever waiting_for is null.")
    placement: dict[str, Any] | None = Field(None, description="Where it trains: the Ray cluster, its nodes and the GPU "
                                             "ids Ray gave it (null: placed by nothing, e.g. a CPU run).")
    priority: int = Field(0, description="0..10: the workers claim a queue's higher-priority runs first, before the "
                          "fair share.")

    @computed_field(description="The run as lists show it: status, except 'waiting' for a running run that waits for "
                    "its GPUs (waiting_for set). GET /api/runs?status=waiting lists those.")
    @property
    def state(self) -> RunState:
        return "waiting" if self.status == "running" and self.waiting_for is not None else self.status


class RunsPublic(BaseModel):
    data: list[RunPublic]
    count: int = Field(description="Runs matching the filters, before limit/offset.")
    limit: int
    offset: int
