"""What the request and response bodies share: the field types (labels, tags, notes, priorities, user names, roles, run
statuses and states, UTC datetimes, sweep overrides) and InputModel, the base of every request body."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, PrivateAttr,
                      StringConstraints, model_validator)

from trainer.spec.config_renames import RENAMED_FIELDS, names_field
from trainer.spec.safetext import no_control_chars
from backend.services.configs import json_safety_issues, json_shape_issue, string_issue


def _storable(value: str) -> str:
    """Pydantic AfterValidator: no lone surrogates (JSON "\\ud800"), which no store can encode."""
    why = string_issue(value)
    if why:
        raise ValueError(why)
    return value


def _override(value: dict[str, Any]) -> dict[str, Any]:
    """A sweep override the store can keep: at most MAX_JSON_DEPTH levels and MAX_JSON_ITEMS
    entries, no NUL / lone surrogates / non-finite numbers / integers beyond 64 bits."""
    why = json_shape_issue(value)
    if why:
        raise ValueError(why)
    issues = json_safety_issues(value)
    if issues:
        raise ValueError("; ".join(f"{path}: {msg}" for path, msg in issues[:5]))
    return value


Override = Annotated[dict[str, Any], AfterValidator(_override)]

RunStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
# A run as lists show it: its status, or "waiting" for a running run that waits for its GPUs
# (waiting_for set; not a stored status, backend/db/runs.py). The runs list filters on these.
RunState = Literal["queued", "waiting", "running", "succeeded", "failed", "cancelled"]
# No control characters (C0, DEL, C1) nor bidi overrides in short labels (trainer.spec.safetext);
# no NUL anywhere (PostgreSQL rejects it in text).
Tag = Annotated[str, StringConstraints(min_length=1, max_length=64), AfterValidator(no_control_chars), AfterValidator(_storable)]
Label = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(no_control_chars), AfterValidator(_storable)]
Notes = Annotated[str, StringConstraints(max_length=10_000, pattern=r"^[^\x00]*$"), AfterValidator(_storable)]
UserName = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(no_control_chars), AfterValidator(_storable)]
Role = Literal["admin", "member", "viewer"]
# A run's priority (backend/services/priority.py): the operator caps it per role, 422 above the cap.
Priority = Annotated[int, Field(ge=0, le=10, description="0..10, default 0: the workers claim a queue's higher-priority "
                                "runs first, before the fair share. Capped by the submitter's role (the operator's "
                                "AERO_PRIORITY_MAX_ADMIN, default 10, and AERO_PRIORITY_MAX_MEMBER, default 5).")]


# The store keeps naive UTC; the API says so explicitly ("...Z").
UtcDatetime = Annotated[datetime, AfterValidator(lambda d: d if d.tzinfo else d.replace(tzinfo=UTC))]


# Request bodies: an unknown field is an error (422), not silently dropped.
class InputModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ConfigBody(InputModel):
    """A request body that carries run configs. It notes the renamed fields (trainer.spec.config
    ``RENAMED_FIELDS``) they name: the configs read them as their new fields, and the route
    answers with a deprecation warning (backend/api/deprecation.py)."""

    _renamed: list[str] = PrivateAttr(default_factory=list)

    @classmethod
    def raw_configs(cls, data: dict[str, Any]) -> list[Any]:
        """The body's configs as sent (JSON values, before validation)."""
        return []

    @model_validator(mode="wrap")
    @classmethod
    def _note_renamed(cls, data: Any, handler: ModelWrapValidatorHandler[ConfigBody]) -> ConfigBody:
        body = handler(data)
        configs = cls.raw_configs(data) if isinstance(data, dict) else []
        body._renamed = [old for old in RENAMED_FIELDS if any(names_field(c, old) for c in configs)]
        return body

    @property
    def renamed(self) -> list[str]:
        """The renamed config fields the request named, each once."""
        return self._renamed
