"""The base types of every config model: ``Strict`` (the strict pydantic base), ``Field``,
``Issues`` (a rule's findings), ``Section`` (a block of the run config that a method or a task
owns), ``Cap`` (an operator cap, declared on the field it bounds) and the tiers of the fields
(``basic()``, ``leaf_tiers``: the Launch form shows the basic fields and keeps the expert ones
behind one expander).

``RunConfig`` (trainer/spec/config.py), its blocks (trainer/spec/alerts.py, trainer/spec/resources.py), the
methods' sections (trainer/methods/) and the tasks' (trainer/tasks/) all build on these. This module imports no other project
module, so each of them can import it without joining an import circle
(tests/test_import_graph.py). Pydantic and the stdlib only; without pydantic (scripts/gpu_check.py
runs the engines with torch and transformers only, its run config a plain namespace) the models
are declared but never built or validated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

try:
    from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
except ImportError:  # see the module docstring
    BaseModel = None

Issues = list[tuple[str, str]]  # (dotted field path, message)


@dataclass(frozen=True)
class Cap:
    """An operator cap on the field it annotates: ``n_max: Annotated[int, Cap(...)] = Field(...)``.

    The run config's value must be <= the operator's limit (trainer/spec/operator_policy.py derives
    its ``RunPolicy`` field ``policy``, the environment variable ``env`` and its table of caps
    from these, so a cap is declared once, by the section that owns the field). ``limit`` is the
    default; ``ge`` (or ``gt``) bounds what an operator may set; a float cap is always finite.
    Pydantic ignores this marker, so the field's schema is unchanged."""

    policy: str
    env: str
    limit: int | float
    description: str
    ge: int | float | None = 1
    gt: int | float | None = None


# A config field's tier, in its JSON schema as ``"tier"``: basic (what a researcher sets on every
# run; the Launch form shows it first) or expert (everything else, behind the form's one
# expander). A field is expert unless its Field says ``json_schema_extra=basic()``; a block (a
# nested config model: optim, aero, resources, ...) has no tier of its own, its fields have one.
TIERS = ("basic", "expert")
EXPERT = "expert"


def basic(**schema_extra: Any) -> dict[str, Any]:
    """The ``json_schema_extra`` of a basic field (with the field's other schema keys, if any)."""
    return {"tier": "basic", **schema_extra}


def block_model(annotation: Any) -> type | None:
    """The config model of a block field (``OptimConfig``, ``AEROConfig | None``), else None (a
    leaf: a value, a list or a dict, even of models, as ``alerts.rules``)."""
    import types
    import typing

    args = [a for a in typing.get_args(annotation) if a is not type(None)] \
        if typing.get_origin(annotation) in (typing.Union, types.UnionType) else [annotation]
    if len(args) == 1 and isinstance(args[0], type) and BaseModel is not None and issubclass(args[0], BaseModel):
        return args[0]
    return None


def field_tier(info: Any) -> str:
    """The tier of a pydantic ``FieldInfo``: its ``json_schema_extra``'s, else expert."""
    extra = info.json_schema_extra
    return str(extra.get("tier", EXPERT)) if isinstance(extra, dict) else EXPERT


def leaf_tiers(model: type, prefix: str = "") -> dict[str, str]:
    """{dotted path: tier} of every leaf field of ``model``, through its blocks, in field order."""
    out: dict[str, str] = {}
    for name, info in model.model_fields.items():  # type: ignore[attr-defined]
        sub = block_model(info.annotation)
        out.update(leaf_tiers(sub, f"{prefix}{name}.") if sub is not None else {prefix + name: field_tier(info)})
    return out


def _tiers_in_schema(schema: dict[str, Any], model: type) -> None:
    """A model's JSON schema names every leaf's tier (``"tier": "expert"`` where none is set)."""
    fields = model.model_fields  # type: ignore[attr-defined]
    for name, prop in (schema.get("properties") or {}).items():
        if name in fields and block_model(fields[name].annotation) is None:
            prop.setdefault("tier", EXPERT)


def no_rules(cfg: Any) -> Issues:
    return []


@dataclass(frozen=True)
class Section:
    """One config block a method or a task owns (``MethodSpec.sections``, ``TaskSpec.section``).

    name: the RunConfig field (``aero`` -> ``cfg.aero``); model: its pydantic model (per-field
    bounds, help texts and caps); rules: cross-field checks of a config that reads the section,
    each naming the field to change; title and form: the Launch form's heading and its (dotted
    path, label) inputs, top-level fields the section needs (``train_size``) included;
    operator_fields: former fields of the block that are the operator's settings now ({field:
    environment variable}), refused with a message naming the setting."""

    name: str
    model: type
    title: str
    form: tuple[tuple[str, str], ...] = ()
    rules: Callable[[Any], Issues] = no_rules  # (RunConfig) -> Issues; no import of it here (module docstring)
    operator_fields: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "form": [list(f) for f in self.form]}


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
        """Unknown keys are refused, assignments validated, numbers must be numbers, and the
        schema names each field's tier."""

        model_config = ConfigDict(extra="forbid", validate_assignment=True, json_schema_extra=_tiers_in_schema)

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
