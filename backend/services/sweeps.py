"""Sweep grids: methods x seeds x overrides, one run config each (POST /api/sweeps)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.dotted import flatten, merge, nest
from trainer.spec.config import for_method
from trainer.spec.config_renames import renamed_fields
from trainer.tasks.registry import retasked

MAX_RUNS_PER_SWEEP = 512


@dataclass(frozen=True)
class GridPoint:
    override_index: int
    method: str
    seed: int
    config: dict[str, Any]


def apply_override(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``override`` applied. Keys may be dotted (``"aero.n_explore": 4``)
    or nested dicts (``{"aero": {"n_explore": 4}}``, merged into the base's section). A renamed
    field is applied under its new name (``sampler`` -> ``rollout.sampler``, with a deprecation
    warning), so it overrides the base's value. An override that changes the task drops the
    base's task section (the code task's ``code`` block) unless it gives that section itself."""
    change = nest(flatten(renamed_fields(override)))
    return retasked(merge(base, change), base.get("task"), kept=change)


def expand_grid(base: Mapping[str, Any], methods: Sequence[str], seeds: Sequence[int], overrides: Sequence[Mapping[str, Any]]) -> list[GridPoint]:
    """One config per (override, method, seed), in that nesting order. Method and seed are set
    last, so they win over an override that names them; each run keeps the config sections its
    method reads (``aero`` for AERO, none for GRPO)."""
    return [
        GridPoint(i, m, s, {**for_method(apply_override(base, ov), m), "seed": s})
        for i, ov in enumerate(overrides or [{}])
        for m in methods
        for s in seeds
    ]


def run_name(sweep_name: str, point: GridPoint, n_overrides: int) -> str:
    """``<sweep>/<method>/s<seed>`` (+ ``/o<i>`` when the sweep has several overrides)."""
    suffix = f"/o{point.override_index}" if n_overrides > 1 else ""
    return f"{sweep_name}/{point.method}/s{point.seed}{suffix}"[:200]
