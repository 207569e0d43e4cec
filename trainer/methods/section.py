"""A method's own config section: a strict pydantic model, its cross-field rules and its form.

A method module declares the sections it reads (trainer/methods/spec.py ``MethodSpec.sections``);
``RunConfig`` (trainer/config.py) carries exactly the chosen method's sections, so a GRPO config
has no ``aero`` block. Pydantic and the stdlib only: the registry, the backend and the config
module import this without torch or numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

try:
    from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
except ImportError:  # scripts/gpu_check.py runs the engines with torch and transformers only; its run config is
    BaseModel = None  # a plain namespace, so the section models are declared but never built or validated

if TYPE_CHECKING:
    from trainer.config import RunConfig

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


def no_rules(cfg: RunConfig) -> Issues:
    return []


@dataclass(frozen=True)
class Section:
    """One config block a method reads.

    name: the RunConfig field (``aero`` -> ``cfg.aero``); model: its pydantic model (per-field
    bounds and help texts); rules: cross-field checks of a config whose method reads the
    section, each naming the field to change; title and form: the Launch form's heading and
    its (dotted path, label) inputs, top-level fields the section needs (``train_size``)
    included."""

    name: str
    model: type[Strict]
    title: str
    form: tuple[tuple[str, str], ...] = ()
    rules: Callable[[RunConfig], Issues] = no_rules

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "form": [list(f) for f in self.form]}
