"""Seed groups: runs whose configs are equal except ``seed`` and ``name`` (issue 6).

A sweep creates them (one group per override x method); /compare/groups forms them from any
list of runs, or takes explicit groups and checks that each differs only by seed. Groups are
keyed by a short hash of the seed-less config and labelled by method, staleness when asynchronous
(``k=2``), plus whatever sets them apart from the other groups of that method
("aero · k=2, aero.n_explore=4").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from backend.db.models import Run
from common.dotted import flatten
from trainer.methods.spec import baseline_method

NOT_GROUPED = ("seed", "name")  # config fields a seed group may differ in
NOT_GROUPED_PREFIXES = ("alerts", "trackers")  # observing a run does not change what it trains
MAX_LABEL_FIELDS = 3
STALENESS = "offpolicy.max_staleness"  # shown as "k=2" on every asynchronous group, whatever else differs


class GroupError(ValueError):
    """An explicit group mixes runs that differ in more than the seed."""

    def __init__(self, index: int, fields: Sequence[str]):
        # top-level fields first: a different method says more than the method sections it brings
        self.index, self.fields = index, sorted(fields, key=lambda f: ("." in f, f))
        shown = ", ".join(self.fields[:8]) + (" ..." if len(self.fields) > 8 else "")
        super().__init__(f"group {index + 1}: runs differ in more than the seed ({shown}); "
                         "a seed group's runs must share every other config field")


@dataclass
class Group:
    key: str
    method: str
    runs: list[Run]
    label: str = ""
    config: dict[str, Any] = field(default_factory=dict)  # flattened seed-less config

    @property
    def run_ids(self) -> list[int]:
        return [r.id for r in self.runs]

    @property
    def seeds(self) -> list[int | None]:
        return [r.config.get("seed") for r in self.runs]


def seedless(config: Mapping[str, Any]) -> dict[str, Any]:
    """The flattened config without the fields a seed group may differ in."""
    return {k: v for k, v in flatten(config).items() if k not in NOT_GROUPED and not k.startswith(NOT_GROUPED_PREFIXES)}


def group_key(config: Mapping[str, Any]) -> str:
    """10 hex chars of SHA-1 over the canonical JSON of the seed-less config."""
    blob = json.dumps(seedless(config), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha1(blob.encode()).hexdigest()[:10]


def differing(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Flattened keys whose value is not the same in every (flattened) config."""
    keys = sorted({k for c in configs for k in c})
    return [k for k in keys if len({json.dumps(c.get(k), sort_keys=True, default=str) for c in configs}) > 1]


def _short(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else json.dumps(v) if isinstance(v, (dict, list)) else str(v)


def label_groups(groups: Sequence[Group]) -> None:
    """Label each group by its method, its staleness when asynchronous (``k=2``: comparisons
    across methods are read by staleness too, so it is shown even where the method's other
    groups share it), plus the fields that tell it from its method's other groups."""
    by_method: dict[str, list[Group]] = {}
    for g in groups:
        by_method.setdefault(g.method, []).append(g)
    for same in by_method.values():
        fields = [f for f in differing([g.config for g in same]) if f != STALENESS] if len(same) > 1 else []
        for g in same:
            k = g.config.get(STALENESS) or 0
            extra = ", ".join([f"k={k}"] * (k > 0) + [f"{f}={_short(g.config.get(f))}" for f in fields[:MAX_LABEL_FIELDS]])
            more = " …" if len(fields) > MAX_LABEL_FIELDS else ""
            g.label = g.method + (f" · {extra}{more}" if extra else "")


def _group(runs: list[Run]) -> Group:
    cfg = seedless(runs[0].config)
    return Group(key=group_key(runs[0].config), method=runs[0].method, runs=runs, config=cfg)


def auto_groups(runs: Sequence[Run]) -> list[Group]:
    """Group runs by seed-less config, in order of first appearance; runs keep their order."""
    buckets: dict[str, list[Run]] = {}
    for r in runs:
        buckets.setdefault(group_key(r.config), []).append(r)
    groups = [_group(rs) for rs in buckets.values()]
    label_groups(groups)
    return groups


def explicit_groups(run_lists: Sequence[Sequence[Run]]) -> list[Group]:
    """The given groups, each checked to differ only by seed (:class:`GroupError` otherwise).
    Two explicit groups with the same config stay separate (see :func:`make_unique`)."""
    groups = []
    for i, runs in enumerate(run_lists):
        fields = differing([seedless(r.config) for r in runs])
        if fields:
            raise GroupError(i, fields)
        groups.append(_group(list(runs)))
    label_groups(groups)
    return make_unique(groups)


def make_unique(groups: list[Group]) -> list[Group]:
    """Keys and labels unique across the list (two groups of the same config, e.g. an explicit
    group and loose runs of that config, get ``-2`` / ``(2)`` suffixes) so none is dropped."""
    keys: set[str] = set()
    labels: dict[str, int] = {}
    for g in groups:
        while g.key in keys:
            g.key += "-2"
        keys.add(g.key)
        labels[g.label] = labels.get(g.label, 0) + 1
        if labels[g.label] > 1:
            g.label += f" ({labels[g.label]})"
    return groups


def default_baseline(groups: Sequence[Group]) -> str:
    """The first group of the baseline method (trainer/methods/), else the first group."""
    base = baseline_method()
    return next((g.key for g in groups if g.method == base), groups[0].key)


def seed_pairs(group: Group, base: Group) -> list[tuple[Run, Run]]:
    """(run, baseline run) with the same seed; the i-th run of a seed pairs with the baseline's
    i-th run of that seed. Runs without a partner are left out."""
    pool: dict[Any, list[Run]] = {}
    for r in base.runs:
        pool.setdefault(r.config.get("seed"), []).append(r)
    pairs = []
    for r in group.runs:
        partners = pool.get(r.config.get("seed"))
        if partners:
            pairs.append((r, partners.pop(0)))
    return pairs
