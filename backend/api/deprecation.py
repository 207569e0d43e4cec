"""The answer to a request that named a renamed run-config field (trainer.spec.config
``RENAMED_FIELDS``: ``sampler`` is ``rollout.sampler``). The config reads the old field as the
new one and is stored under the new name; the response says so in a ``Warning`` header (code
299, a persistent warning), one warning per field, which the OpenAPI document does not list."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import Response

from trainer.spec.config_renames import RENAMED_FIELDS


def warning_text(old: str) -> str:
    new, values = RENAMED_FIELDS[old]
    if all(v == w for v, w in values.items()):
        return f"run config field {old} is deprecated: use {new} (the same values)"
    same = ", ".join(f"{old}={v} is {new}={w}" for v, w in values.items())
    return f"run config field {old} is deprecated: use {new} ({same})"


def warn_renamed(response: Response, renamed: Sequence[str]) -> None:
    """Add the ``Warning`` header for each renamed field in ``renamed`` to ``response``."""
    for old in renamed:
        response.headers.append("Warning", f'299 - "{warning_text(old)}"')
