"""Sweep grids: methods x seeds x overrides, one run config each (POST /api/sweeps)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_RUNS_PER_SWEEP = 512


@dataclass(frozen=True)
class GridPoint:
    override_index: int
    method: str
    seed: int
    config: dict[str, Any]


def set_path(d: dict[str, Any], dotted: str, value: Any) -> None:
    """d["a"]["b"] = value for dotted "a.b" (creating dicts on the way)."""
    *parents, leaf = dotted.split(".")
    for p in parents:
        nxt = d.get(p)
        if not isinstance(nxt, dict):
            nxt = d[p] = {}
        d = nxt
    d[leaf] = value


def apply_override(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``override`` applied. Keys may be dotted (``"aero.n_explore": 4``)
    or nested dicts (``{"aero": {"n_explore": 4}}``, merged into the base's section)."""
    out = copy.deepcopy(dict(base))

    def merge(prefix: str, ov: Mapping[str, Any]) -> None:
        for k, v in ov.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, Mapping):
                merge(path, v)  # an empty mapping changes nothing
            else:
                set_path(out, path, copy.deepcopy(v))

    merge("", override)
    return out


def expand_grid(base: Mapping[str, Any], methods: Sequence[str], seeds: Sequence[int], overrides: Sequence[Mapping[str, Any]]) -> list[GridPoint]:
    """One config per (override, method, seed), in that nesting order. Method and seed are set
    last, so they win over an override that names them."""
    return [
        GridPoint(i, m, s, {**apply_override(base, ov), "method": m, "seed": s})
        for i, ov in enumerate(overrides or [{}])
        for m in methods
        for s in seeds
    ]


def run_name(sweep_name: str, point: GridPoint, n_overrides: int) -> str:
    """``<sweep>/<method>/s<seed>`` (+ ``/o<i>`` when the sweep has several overrides)."""
    suffix = f"/o{point.override_index}" if n_overrides > 1 else ""
    return f"{sweep_name}/{point.method}/s{point.seed}{suffix}"[:200]
