"""Renamed and moved run-config fields. A config that names a field by its former name or place
(a REST body, a sweep, ``--set``, a JSON file, a stored config; nested or dotted) is read as the
new field with a :class:`ConfigDeprecationWarning` naming it; one that cannot be (a value the old
field never took, or the new field given too and disagreeing) is refused, naming the old field.
Stored configs were rewritten by Alembic (``rollout_engine`` -> ``sampler``: 0012; the
generation fields into the ``rollout`` block: 0017).

pydantic, the stdlib and common.dotted (the merge a sweep's override uses); imports no trainer
module. RunConfig reads it (trainer/spec/config.py); the backend and the CLI import its public
names from here."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from common.dotted import merge, nest


def _same(*values: str) -> dict[str, str]:
    return {v: v for v in values}


# old dotted path -> (new dotted path, {old value: new value}); a value not listed is refused
RENAMED_FIELDS: dict[str, tuple[str, dict[str, str]]] = {
    "rollout_engine": ("rollout.sampler", {"embedded": "hf", "vllm": "vllm"}),
    "sampler": ("rollout.sampler", _same("hf", "vllm")),
    "rollout_decode": ("rollout.decode", _same("dynamic", "static", "graphs")),
    "sampler_rng": ("rollout.rng", _same("stream", "per-row")),
    "aero.schedule": ("rollout.schedule", _same("calls", "continuous")),
}
_MISSING = object()


class ConfigDeprecationWarning(DeprecationWarning):
    """A run config named a renamed field (:data:`RENAMED_FIELDS`); the message names the new one."""


def field_value(data: Any, path: str) -> Any:
    """The value at dotted ``path`` of a config given nested (``{"aero": {"schedule": x}}``) or
    dotted (``{"aero.schedule": x}``, a sweep override or ``--set``); ``_MISSING`` if absent."""
    if not isinstance(data, Mapping):
        return _MISSING
    if path in data:
        return data[path]
    head, _, rest = path.partition(".")
    return field_value(data.get(head), rest) if rest and head in data else _MISSING


def names_field(data: Any, path: str) -> bool:
    """Whether the config ``data`` gives the field at dotted ``path`` (nested or dotted)."""
    return field_value(data, path) is not _MISSING


def _without(data: Mapping[str, Any], path: str) -> dict[str, Any]:
    """A copy of ``data`` without ``path`` (a section left empty by it stays, empty: the method
    that reads it still gets its defaults)."""
    out = dict(data)
    if path in out:
        del out[path]
        return out
    head, _, rest = path.partition(".")
    out[head] = _without(out[head], rest)
    return out


def _can_hold(data: Any, path: str) -> bool:
    """Whether ``path`` can be set in ``data``: every block on the way is absent or an object."""
    head, _, rest = path.partition(".")
    if not rest or head not in data:
        return True
    return isinstance(data[head], Mapping) and _can_hold(data[head], rest)


def renamed_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with each renamed field it names moved to the new place and value, with a
    :class:`ConfigDeprecationWarning` each; a field that cannot be moved stays as given."""
    out = dict(data)
    for old, (new, values) in RENAMED_FIELDS.items():
        given = field_value(out, old)
        value = values.get(given) if isinstance(given, str) else None
        if value is None:
            continue
        current = field_value(out, new)
        if (current is not _MISSING and current != value) or not _can_hold(out, new):
            continue
        out = merge(_without(out, old), nest({new: value}))
        warnings.warn(f"run config field {old} is deprecated: use {new} ({old}={given} is {new}={value})",
                      ConfigDeprecationWarning, stacklevel=2)
    return out


def refusal(old: str, data: Mapping[str, Any]) -> str:
    """Why ``data``'s ``old`` field could not be read as its new one."""
    new, values = RENAMED_FIELDS[old]
    given = field_value(data, old)
    if not isinstance(given, str) or given not in values:
        return (f"moved to {new}; {old} took {' or '.join(values)}: give "
                f"{' or '.join(f'{new}={v}' for v in dict.fromkeys(values.values()))}")
    if not _can_hold(data, new):
        return f"moved to {new}, and {new.split('.')[0]} is not an object: give {new}={values[given]} there"
    return (f"moved to {new}, which is given too: {old}={given} is {new}={values[given]}, not "
            f"{new}={field_value(data, new)}; give {new} alone")


def read_renamed(data: Any, title: str) -> Any:
    """A model's before-validator (``title``: the model's name): ``data`` with its renamed fields
    moved (:func:`renamed_fields`), or a ValidationError naming each one that cannot be."""
    if not isinstance(data, dict) or not any(names_field(data, old) for old in RENAMED_FIELDS):
        return data
    data = renamed_fields(data)
    if left := [old for old in RENAMED_FIELDS if names_field(data, old)]:
        raise ValidationError.from_exception_data(title, [InitErrorDetails(
            type=PydanticCustomError("renamed_field", "{why}", {"why": refusal(old, data)}), loc=tuple(old.split(".")),
            input=field_value(data, old)) for old in left])
    return data
