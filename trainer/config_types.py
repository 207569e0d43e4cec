"""The base types of every config model: ``Strict`` (the strict pydantic base), ``Field`` and
``Issues`` (a rule's findings).

``RunConfig`` (trainer/config.py), its blocks (trainer/alerts.py, trainer/resources.py) and the
methods' sections (trainer/methods/) all build on these. This module imports no other project
module, so each of them can import it without joining an import circle
(tests/test_import_graph.py). Pydantic and the stdlib only; without pydantic (scripts/gpu_check.py
runs the engines with torch and transformers only, its run config a plain namespace) the models
are declared but never built or validated.
"""

from __future__ import annotations

from typing import Any

try:
    from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
except ImportError:  # see the module docstring
    BaseModel = None

Issues = list[tuple[str, str]]  # (dotted field path, message)


def _numeric_kind(annotation: Any) -> str | None:
    """"integer" / "number" for an int / float field (``| None`` allowed), else None."""
    import types
    import typing

    args = [a for a in typing.get_args(annotation) if a is not type(None)] \
        if typing.get_origin(annotation) in (typing.Union, types.UnionType) else [annotation]
    if args and all(a in (int, float) for a in args):
        return "integer" if all(a is int for a in args) else "number"
    return None


if BaseModel is not None:
    class Strict(BaseModel):
        """Unknown keys are refused, assignments validated, and numbers must be numbers."""

        model_config = ConfigDict(extra="forbid", validate_assignment=True)

        @field_validator("*", mode="before")
        @classmethod
        def _strict_numbers(cls, value: Any, info: ValidationInfo) -> Any:
            """"10" and true are refused for int and float fields (pydantic's lax mode would coerce
            them), and 10.5 for an int field as before; 10.0 stays an int."""
            kind = _numeric_kind(cls.model_fields[info.field_name].annotation)
            if kind and isinstance(value, (str, bytes, bool)):
                from pydantic_core import PydanticCustomError

                raise PydanticCustomError("int_type" if kind == "integer" else "float_type",
                                          "Input should be a JSON {kind}, not {what}",
                                          {"kind": kind, "what": "a boolean" if isinstance(value, bool) else "a string"})
            return value
else:
    class Strict:  # type: ignore[no-redef]  (no pydantic: see the import above)
        pass

    def Field(default: Any = None, **_: Any) -> Any:  # type: ignore[no-redef]  # noqa: N802
        return default
