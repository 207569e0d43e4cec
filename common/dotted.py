"""Dotted config paths (``"aero.n_explore"``) <-> nested dicts, written once (stdlib only).

A run config is nested JSON, but people name its fields by dotted path: ``--set aero.k=2`` on
the command line, the Launch form's fields, a sweep's overrides, the seed-group labels. Every
client converts the same way, so the backend, the dashboard, the CLI and the trainer import
these instead of each writing its own loop. Stdlib only, so the dashboard may import it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def set_path(d: dict[str, Any], dotted: str, value: Any) -> None:
    """``d["a"]["b"] = value`` for ``"a.b"``, creating dicts on the way (a non-dict in the way
    is replaced: the dotted path is the more specific statement)."""
    *parents, leaf = dotted.split(".")
    for p in parents:
        nxt = d.get(p)
        if not isinstance(nxt, dict):
            nxt = d[p] = {}
        d = nxt
    d[leaf] = value


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``{"aero.k": 1, "steps": 3}`` -> ``{"aero": {"k": 1}, "steps": 3}``."""
    out: dict[str, Any] = {}
    for path, value in flat.items():
        set_path(out, path, value)
    return out


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"aero": {"n_explore": 8}}`` -> ``{"aero.n_explore": 8}``. Lists, scalars and empty
    mappings are leaves, so ``nest(flatten(d)) == d`` for a dict of dicts."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, path + "."))
        else:
            out[path] = v
    return out


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``extra`` laid over it, section by section: a mapping in
    ``extra`` is merged into the section of the same name, anything else replaces. A mapping
    with no value anywhere inside (``{}``, ``{"a": {}}``) changes nothing, not even by creating
    a section. Keys are taken literally (``nest`` first for dotted ones); neither input is
    changed."""
    out = copy.deepcopy(dict(base))
    for k, v in extra.items():
        if not isinstance(v, Mapping):
            out[k] = copy.deepcopy(v)
        elif _has_value(v):
            inner = out.get(k)
            out[k] = merge(inner if isinstance(inner, Mapping) else {}, v)
    return out


def _has_value(m: Mapping[str, Any]) -> bool:
    return any(not isinstance(v, Mapping) or _has_value(v) for v in m.values())


def with_defaults(data: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``data`` with each dotted default (``{"optim.lr": 1e-5}``) set where ``data``
    leaves its key out; everything ``data`` holds is kept as it is, empty sections included. A
    section that is not a dict is left alone, for validation to name. ``data`` is not changed."""
    out = dict(data)
    for dotted, value in defaults.items():
        *parents, leaf = dotted.split(".")
        node = out
        for p in parents:
            child = node.get(p, {})
            if not isinstance(child, dict):
                break
            node[p] = node = dict(child)
        else:
            node.setdefault(leaf, value)
    return out
