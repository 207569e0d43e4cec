"""Service-level bodies: the health check and a plain error message."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class HealthPublic(BaseModel):
    status: Literal["ok"]
    database: str
    broker: str


class Message(BaseModel):
    detail: str
