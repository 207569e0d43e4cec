"""Run-config validation for the API: trainer.spec.config.parse_run_config plus what the store needs
(strings without NUL characters or lone surrogates, finite numbers: PostgreSQL's JSONB accepts
none of them), and the shape limits of free-form JSON (sweep overrides)."""

from __future__ import annotations

import math
from typing import Any

from trainer.spec.config import ConfigError, RunConfig, parse_run_config
from trainer.spec.engine_registry import get_engine
from trainer.spec.operator_policy import RunPolicy
from trainer.spec.resources import gpus_held


MAX_JSON_DEPTH = 8  # nesting levels of a sweep override (RunConfig itself is 2 deep)
MAX_JSON_ITEMS = 256  # keys + list items of one override, all levels together


def string_issue(value: str) -> str | None:
    """Why the store cannot keep ``value`` (NUL, lone UTF-16 surrogate), or None."""
    if "\x00" in value:
        return "must not contain NUL (\\u0000) characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (no lone surrogates such as \\ud800)"
    return None


def json_safety_issues(value: Any, path: str = "") -> list[tuple[str, str]]:
    """(dotted path, message) for every string with NUL or a lone surrogate (keys included),
    non-finite float and integer beyond 64 bits in ``value``."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [] if -(2**63) <= value < 2**63 else [(path or "config", "must fit in 64 bits (|value| < 2**63)")]
    if isinstance(value, str):
        why = string_issue(value)
        return [(path or "config", why)] if why else []
    if isinstance(value, float):
        return [] if math.isfinite(value) else [(path or "config", "must be a finite number (not NaN or infinity)")]
    if isinstance(value, dict):
        issues = []
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            why = string_issue(str(k))
            if why:
                issues.append((path or "config", f"key {ascii(k)} {why}"))
                continue
            issues += json_safety_issues(v, sub)
        return issues
    if isinstance(value, (list, tuple)):
        return [i for n, v in enumerate(value) for i in json_safety_issues(v, f"{path}.{n}" if path else str(n))]
    return []


def json_shape_issue(value: Any, max_depth: int = MAX_JSON_DEPTH, max_items: int = MAX_JSON_ITEMS) -> str | None:
    """Why free-form JSON is too big to accept (nested deeper than ``max_depth`` levels, more than
    ``max_items`` keys and list items), or None. Iterative: never recurses on hostile input."""
    stack, items = [(value, 1)], 0
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list, tuple)):
            if depth > max_depth:
                return f"nested deeper than {max_depth} levels"
            children = node.values() if isinstance(node, dict) else node
            items += len(node)
            if items > max_items:
                return f"more than {max_items} keys and list items"
            stack.extend((c, depth + 1) for c in children)
    return None


def validate_config(data: dict[str, Any] | RunConfig, policy: RunPolicy | None = None) -> RunConfig:
    """A RunConfig that can run and be stored, or ConfigError naming every bad field; with the
    operator's ``policy`` (``Settings.run_policy``), also its caps and data roots."""
    raw = data.model_dump() if isinstance(data, RunConfig) else data
    issues = json_safety_issues(raw)
    if issues:
        raise ConfigError(issues)
    return parse_run_config(raw, policy)


def run_gpus(cfg: RunConfig) -> int:
    """The GPUs the run will hold, as the submit-time quota and the workers' GPU quota count them
    (trainer/spec/resources.py; an embedded ``device=auto`` run counts 0 here, and its worker records 1
    once it places it on a GPU)."""
    return gpus_held(cfg, cuda=cfg.device == "cuda")


def queue_for(cfg: RunConfig, cpu_queue: str = "cpu", gpu_queue: str = "gpu") -> str:
    """GPU queue for ``device="cuda"``, and for an engine made for clusters (``gpu_by_default``,
    trainer/spec/engine_registry.py: verl) unless ``device="cpu"`` (verl on the CPU, docs/engines.md: a CPU
    worker with the verl extra runs it); CPU queue otherwise.
    ``device="auto"`` on the embedded engine (``sampler="vllm"`` included, which falls back to
    the hf sampler without CUDA) goes to the CPU queue, so the embedded single-worker setup,
    which consumes only that queue, runs it; set ``device="cuda"`` to route a run to GPU workers."""
    gpu = cfg.device == "cuda" or (get_engine(cfg.engine).gpu_by_default and cfg.device != "cpu")
    return gpu_queue if gpu else cpu_queue
