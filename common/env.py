"""Operator settings read straight from the environment where no settings object is at hand
(an engine's connect hook, a process's exit hook), with an error that names the variable."""

from __future__ import annotations

import os


def env_seconds(name: str, default: float, *, zero_means: str | None = None) -> float:
    """``name`` as a number of seconds: > 0, or also 0 when ``zero_means`` says what 0 does."""
    raw = os.environ.get(name, str(default))
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (value > 0 or (zero_means is not None and value == 0)):
        allowed = f">= 0 (0 = {zero_means})" if zero_means is not None else "> 0"
        raise ValueError(f"{name}={raw!r}: expected a number of seconds {allowed}")
    return value
