"""The Launch form's generic expert inputs: every expert field of RunConfig that no hand-written
input shows (the form's sections in dashboard/forms.py, the model chooser, the Name input and the
alert and tracker inputs of dashboard/launch_extras.py), one input each, built from the API's
OpenAPI schema: a checkbox for a bool, a selectbox for a choice, a number input for a number (its
bounds when the schema gives them), a text input for a string or a nullable number (empty = null),
a JSON text area for a mapping or a list.

They sit in the *Expert settings* expander, by config block: RunConfig's own fields, then each
block's (a method's or a task's section only when a chosen method or the model's task reads it;
the schema's ``x-methods`` / ``x-tasks``, and the method specs). A field goes into the request
body only when its input differs from what it started at (the schema's default, a real model's
preset value or a cloned run's), so an untouched form sends what it always sent."""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st

from dashboard import forms, ui

# Expert fields with inputs of their own elsewhere on the page: the Name input (the run's name)
# and the alert and tracker inputs (launch_extras.inputs).
HAND_WRITTEN: tuple[str, ...] = ("name", "alerts.rules", "alerts.webhook_url", "trackers")
TOP_LEVEL = "More settings"  # the heading of RunConfig's own fields; a block's: "More <block> settings"
SCALARS = ("boolean", "choice", "integer", "number", "string")  # any other kind is edited as JSON


@dataclass(frozen=True)
class Field:
    """One generic input: the dotted path, its kind (one of :data:`SCALARS`, or "json"), and the
    schema's default, help text, choices, nullability and inclusive bounds."""

    path: str
    kind: str
    default: Any = None
    help: str = ""
    choices: tuple[Any, ...] = ()
    nullable: bool = False
    minimum: float | None = None
    maximum: float | None = None


@dataclass(frozen=True)
class Group:
    """The generic inputs of one config block ("" for RunConfig's own fields), under ``title``."""

    name: str
    title: str
    fields: tuple[Field, ...]


def number_text(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def bounds_text(alt: Mapping[str, Any]) -> str:
    parts = [f"{op} {number_text(alt[key])}" for key, op in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
                                                   ("exclusiveMaximum", "<")) if isinstance(alt.get(key), (int, float))]
    return f" Range: {', '.join(parts)}." if parts else ""


def field_of(path: str, prop: Mapping[str, Any]) -> Field:
    """A :class:`Field` from a leaf's property schema."""
    alts = [s for s in prop.get("anyOf", ()) if s.get("type") != "null"] or [prop]
    nullable = len(alts) < len(prop.get("anyOf", ())) or prop.get("default", 0) is None
    alt = alts[0] if len(alts) == 1 else {}
    choices = tuple(alt.get("enum") or ())
    kind = "choice" if choices else alt.get("type") if alt.get("type") in SCALARS else "json"
    default = prop.get("default", {"object": {}, "array": []}.get(alt.get("type")))
    note = " Empty: none (null)." if nullable and kind not in ("boolean", "choice") else ""
    text = f"{prop.get('description') or ''}{bounds_text(alt)}{note} Field `{path}`, default `{json.dumps(default)}`."
    return Field(path, kind, default, text.strip(), choices, nullable, alt.get("minimum"), alt.get("maximum"))


def block_title(name: str, prop: Mapping[str, Any], menu: forms.MethodMenu) -> str:
    for spec in menu.specs.values():
        for sec in spec.get("sections", ()):
            if sec.get("name") == name:
                return str(sec["title"])  # a method section's heading, the hand-written inputs' too
    described = str(prop.get("description") or "")
    return described.split(": ", 1)[0] if ": " in described else f"More {name} settings"


def section_read(name: str, prop: Mapping[str, Any], menu: forms.MethodMenu, methods: Sequence[str],
                 tasks: Collection[str]) -> bool:
    """Whether a block is shown: always for a block every run has; for a method's or a task's
    section (nullable) when a chosen method or one of the model's ``tasks`` reads it."""
    if not any(s.get("type") == "null" for s in prop.get("anyOf", ())):
        return True
    readers = {m for m, spec in menu.specs.items() for sec in spec.get("sections", ()) if sec.get("name") == name}
    return bool((readers | set(prop.get("x-methods") or ())) & set(methods) or set(prop.get("x-tasks") or ()) & set(tasks))


def is_block(doc: Mapping[str, Any], prop: Mapping[str, Any]) -> bool:
    """Whether a property is a block of fields (optim, a section), not a leaf."""
    target = forms.resolve(doc, prop)
    return target is not prop and "properties" in target


def leaf_schema(doc: Mapping[str, Any], prop: Mapping[str, Any]) -> Mapping[str, Any]:
    """A leaf's property with a type it refers to (an enum's schema) read in place."""
    target = forms.resolve(doc, prop)
    if target is prop:
        return prop
    rest = {k: v for k, v in prop.items() if k not in ("$ref", "allOf", "anyOf")}
    nulls = [s for s in prop.get("anyOf", ()) if s.get("type") == "null"]
    return {**rest, "anyOf": [target, *nulls]} if nulls else {**target, **rest}


def groups(doc: Mapping[str, Any], menu: forms.MethodMenu, methods: Sequence[str], shown: Collection[str],
           tasks: Collection[str] = ()) -> dict[str, Group]:
    """{title: Group} of the expert fields the form does not show otherwise (``shown``, and
    :data:`HAND_WRITTEN`): RunConfig's own first, then each block's that is read, in the schema's order."""
    skip = set(shown) | set(HAND_WRITTEN)
    props = doc["components"]["schemas"]["RunConfig"].get("properties") or {}

    def fields(node: Mapping[str, Any], prefix: str) -> tuple[Field, ...]:
        return tuple(field_of(prefix + n, leaf_schema(doc, p)) for n, p in (node.get("properties") or {}).items()
                     if p.get("tier") != forms.BASIC and prefix + n not in skip)

    out: dict[str, Group] = {}
    own = fields({"properties": {n: p for n, p in props.items() if not is_block(doc, p)}}, "")
    if own:
        out[TOP_LEVEL] = Group("", TOP_LEVEL, own)
    for name, prop in props.items():
        block = forms.resolve(doc, prop)
        if not is_block(doc, prop) or not section_read(name, prop, menu, methods, tasks):
            continue
        found = fields(block, f"{name}.")
        if found:
            title = block_title(name, prop, menu)
            out[title] = Group(name, title, found)
    return out


def every_field(found: Mapping[str, Group]) -> list[Field]:
    return [f for g in found.values() for f in g.fields]


def claims(found: Mapping[str, Group], path: str) -> bool:
    """Whether an error at ``path`` is shown by a generic input (or a section's heading)."""
    return any(path == g.name for g in found.values() if g.name) or any(
        path == f.path or (f.kind == "json" and path.startswith(f.path + ".")) for f in every_field(found))


def lookup(config: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def initial_values(found: Mapping[str, Group], preset_values: Mapping[str, Any],
                   run_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """{path: the value its input starts at}: the cloned run's, else the real model's preset
    value, else the schema's default."""
    out = {}
    for f in every_field(found):
        has, value = lookup(run_config or {}, f.path)
        out[f.path] = value if has else preset_values.get(f.path, f.default)
    return out


def options(f: Field) -> list[Any]:
    return [*([None] if f.nullable else []), *f.choices]


def json_text(f: Field, value: Any) -> str:
    return "" if value == f.default or value is None else json.dumps(value)


def start(f: Field, value: Any) -> Any:
    """The value an untouched input of ``f`` stands for, given the value it starts at."""
    if f.kind == "choice":
        return value if value in options(f) else options(f)[0]
    if f.kind == "boolean":
        return bool(value)
    if f.kind in ("integer", "number") and not f.nullable:
        return (int if f.kind == "integer" else float)(value or 0)
    if f.kind == "json":
        return f.default if value is None else value
    return value


def parse(f: Field, raw: Any) -> Any:
    """The request value of an input's ``raw`` value; ValueError saying what is wrong."""
    if f.kind == "json":
        text = str(raw or "").strip()
        if not text:
            return f.default
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"not valid JSON ({e.msg}, line {e.lineno} column {e.colno})") from None
    if f.kind in ("integer", "number") and f.nullable:  # a text input: empty = null
        text = str(raw or "").strip()
        if not text:
            return None
        try:
            value = int(text) if f.kind == "integer" else float(text)
        except ValueError:
            raise ValueError("not a whole number" if f.kind == "integer" else "not a number") from None
        if not math.isfinite(value):
            raise ValueError("not a finite number")
        return value
    if f.kind == "string" and f.nullable and not str(raw or "").strip():
        return None
    return raw


def changed(found: Mapping[str, Group], raw: Mapping[str, Any], initial: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """({path: value} of the inputs the user changed, {path: error naming the field})."""
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for f in every_field(found):
        if f.path not in raw:
            continue
        try:
            value = parse(f, raw[f.path])
        except ValueError as e:
            errors[f.path] = f"{f.path}: {e}"
            continue
        if value != start(f, initial.get(f.path)):
            values[f.path] = value
    return values, errors


def widget(f: Field, value: Any, errors: Mapping[str, str]) -> Any:
    """The input of ``f`` starting at ``value``, then the errors naming it."""
    key, label = f"f_{f.path}", f.path.rsplit(".", 1)[-1]
    if f.kind == "boolean":
        out = st.checkbox(label, value=bool(value), help=f.help, key=key)
    elif f.kind == "choice":
        opts = options(f)
        out = st.selectbox(label, opts, index=opts.index(start(f, value)), help=f.help, key=key,
                           format_func=lambda o: "none" if o is None else str(o))
    elif f.kind in ("integer", "number") and not f.nullable:
        cast = int if f.kind == "integer" else float
        v = start(f, value)
        lo = cast(f.minimum) if f.minimum is not None and v >= f.minimum else None
        hi = cast(f.maximum) if f.maximum is not None and v <= f.maximum else None
        step = 1 if cast is int else (abs(v) / 10 if v else 0.01)
        out = st.number_input(label, value=v, min_value=lo, max_value=hi, step=step, help=f.help, key=key,
                              **({} if cast is int else {"format": "%g"}))
    elif f.kind == "json":
        out = st.text_area(label, value=json_text(f, value), help=f.help, key=key, placeholder="JSON")
    else:
        out = st.text_input(label, value="" if value is None else str(value), help=f.help, key=key,
                            placeholder="none" if f.nullable else "")
    for path, msg in errors.items():
        if path == f.path or (f.kind == "json" and path.startswith(f.path + ".")):
            st.error(ui.md(msg), icon=":material/error:")
    return out


def inputs(group: Group | None, initial: Mapping[str, Any], errors: Mapping[str, str], heading: bool = False) -> dict[str, Any]:
    """The inputs of ``group`` (none when None), three to a row and the JSON ones below them,
    under its heading when ``heading``: {path: raw input value} for :func:`changed`."""
    if group is None:
        return {}
    if heading:
        st.markdown(f"**{ui.md(group.title)}**")
    if group.name and errors.get(group.name):
        st.error(ui.md(f"{group.name}: {errors[group.name]}"), icon=":material/error:")
    out: dict[str, Any] = {}
    scalars = [f for f in group.fields if f.kind != "json"]
    cols = st.columns(3) if scalars else []
    for i, f in enumerate(scalars):
        with cols[i % 3]:
            out[f.path] = widget(f, initial.get(f.path), errors)
    for f in group.fields:
        if f.kind == "json":
            out[f.path] = widget(f, initial.get(f.path), errors)
    return out
