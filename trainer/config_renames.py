"""Renamed run-config fields. A config that names a field by its former name (a REST body, a
sweep, ``--set``, a JSON file, a stored config) is read as the new field with a
:class:`ConfigDeprecationWarning` naming it; one that cannot be (a value the old field never
took, or the new field given too and disagreeing) is refused, naming the old field. Stored
configs were rewritten by Alembic (``rollout_engine`` -> ``sampler``: 0012).

pydantic + stdlib; imports no project module. RunConfig reads it (trainer/config.py, which
re-exports its public names for the backend and the CLI)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

# old name -> (new name, {old value: new value})
RENAMED_FIELDS: dict[str, tuple[str, dict[str, str]]] = {
    "rollout_engine": ("sampler", {"embedded": "hf", "vllm": "vllm"})}


class ConfigDeprecationWarning(DeprecationWarning):
    """A run config named a renamed field (:data:`RENAMED_FIELDS`); the message names the new one."""


def renamed_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with each renamed field it names moved to the new name and value, with a
    :class:`ConfigDeprecationWarning` each; a field that cannot be moved stays as given."""
    out = dict(data)
    for old, (new, values) in RENAMED_FIELDS.items():
        value = values.get(out[old]) if isinstance(out.get(old), str) else None
        if value is None or out.get(new, value) != value:
            continue
        del out[old]
        out[new] = value
        warnings.warn(f"run config field {old} is deprecated: use {new} ({old}={data[old]} is {new}={value})",
                      ConfigDeprecationWarning, stacklevel=2)
    return out


def refusal(old: str, data: Mapping[str, Any]) -> str:
    """Why ``data``'s ``old`` field could not be read as its new one."""
    new, values = RENAMED_FIELDS[old]
    if not isinstance(data[old], str) or data[old] not in values:
        return f"renamed to {new}; {old} took {' or '.join(values)}: give {new}={' or '.join(values.values())}"
    return (f"renamed to {new}, which is given too: {old}={data[old]} is {new}={values[data[old]]}, not "
            f"{new}={data[new]}; give {new} alone")


def read_renamed(data: Any, title: str) -> Any:
    """A model's before-validator (``title``: the model's name): ``data`` with its renamed fields
    moved (:func:`renamed_fields`), or a ValidationError naming each one that cannot be."""
    if not isinstance(data, dict) or not RENAMED_FIELDS.keys() & data.keys():
        return data
    data = renamed_fields(data)
    if left := [old for old in RENAMED_FIELDS if old in data]:
        raise ValidationError.from_exception_data(title, [InitErrorDetails(
            type=PydanticCustomError("renamed_field", "{why}", {"why": refusal(old, data)}), loc=(old,),
            input=data[old]) for old in left])
    return data
