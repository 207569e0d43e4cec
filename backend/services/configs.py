"""Run-config validation for the API: trainer.config.parse_run_config plus what the store needs
(strings without NUL characters, finite numbers: PostgreSQL's JSONB accepts neither)."""

from __future__ import annotations

import math
from typing import Any

from trainer.config import ConfigError, RunConfig, parse_run_config


def json_safety_issues(value: Any, path: str = "") -> list[tuple[str, str]]:
    """(dotted path, message) for every NUL-containing string, non-finite float and integer
    beyond 64 bits in ``value``."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [] if -(2**63) <= value < 2**63 else [(path or "config", "must fit in 64 bits (|value| < 2**63)")]
    if isinstance(value, str):
        return [(path or "config", "must not contain NUL (\\u0000) characters")] if "\x00" in value else []
    if isinstance(value, float):
        return [] if math.isfinite(value) else [(path or "config", "must be a finite number (not NaN or infinity)")]
    if isinstance(value, dict):
        return [i for k, v in value.items() for i in json_safety_issues(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, (list, tuple)):
        return [i for n, v in enumerate(value) for i in json_safety_issues(v, f"{path}.{n}" if path else str(n))]
    return []


def validate_config(data: dict[str, Any] | RunConfig) -> RunConfig:
    """A RunConfig that can run and be stored, or ConfigError naming every bad field."""
    raw = data.model_dump() if isinstance(data, RunConfig) else data
    issues = json_safety_issues(raw)
    if issues:
        raise ConfigError(issues)
    return parse_run_config(raw)


def queue_for(cfg: RunConfig, cpu_queue: str = "cpu", gpu_queue: str = "gpu") -> str:
    """GPU queue for ``device="cuda"`` or the verl engine; CPU queue otherwise. ``device="auto"``
    (vLLM rollouts included, which fall back to the embedded engine without CUDA) goes to the
    CPU queue, so the embedded single-worker setup, which consumes only that queue, runs it;
    set ``device="cuda"`` to route a run to GPU workers."""
    return gpu_queue if cfg.device == "cuda" or cfg.engine == "verl" else cpu_queue
