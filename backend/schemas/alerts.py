"""A run's alert rules and the events they fired (trainer/spec/alerts.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from backend.schemas.base import UtcDatetime


class AlertEventPublic(BaseModel):
    """An alert rule of the run that fired (trainer/spec/alerts.py)."""

    model_config = ConfigDict(from_attributes=True)

    rule: int = Field(description="Index of the rule in config.alerts.rules.")
    kind: str
    step: int = Field(description="The step (or evaluation step) it fired at.")
    value: float | None = Field(description="The value that tripped it, when it has one.")
    message: str
    stopped: bool = Field(description="The rule stopped the run.")
    delivery: str = Field(description="What became of the webhook post: 'posted: HTTP 200', 'failed: ...', "
                          "'refused: ...', 'recorded (no webhook_url)', or '' for a stop-only rule.")
    created_at: UtcDatetime


class AlertsPublic(BaseModel):
    rules: list[dict[str, Any]] = Field(description="The run's rules (config.alerts.rules).")
    webhook: bool = Field(description="Whether the run posts its alerts to a webhook (the URL is not shown).")
    events: list[AlertEventPublic] = Field(description="Fired rules, oldest first.")
    stop_reason: str | None = Field(description="The rule that stopped the run early, if one did.")
