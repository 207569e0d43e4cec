"""The Launch form's model: which methods it offers (:class:`MethodMenu`, from the API's method
specs), which config fields it shows, their defaults, help texts and tiers (read from the API's
OpenAPI schema, i.e. trainer.spec.config.RunConfig's paper defaults, so the form and the API never
disagree), and the request bodies it sends. Pure functions and values, no Streamlit.

Each config field is basic or expert (the schema's ``"tier"``, trainer/spec/config_types.py): the
form shows the basic fields first and keeps every expert one behind one expander."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class MethodMenu:
    """The methods the form offers, from the API's method specs (GET /api/methods), in their
    order: name -> spec, and name -> the menu text. An immutable value built from the specs
    (dashboard/ui.py builds it once per page run, tests from the specs directly) and handed to
    :func:`sections_for`, :func:`form_specs` and the Launch page: no module-level state, so two
    sessions or two tests never see each other's menus. :data:`NO_MENU` offers nothing."""

    specs: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))
    choices: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_specs(cls, specs: Iterable[Mapping[str, Any]]) -> MethodMenu:
        """From the items of GET /api/methods (``name``, ``description``, ``sections``, ``clip``),
        in their order; later changes to ``specs`` do not reach the menu."""
        by_name: dict[str, Mapping[str, Any]] = {}
        texts: dict[str, str] = {}
        for spec in specs:
            by_name[spec["name"]] = MappingProxyType(copy.deepcopy(dict(spec)))  # plain JSON: cheap
            texts[spec["name"]] = spec["description"]
        return cls(MappingProxyType(by_name), MappingProxyType(texts))

    @property
    def names(self) -> tuple[str, ...]:
        """The offered methods, in the specs' order."""
        return tuple(self.choices)

    def text(self, method: str) -> str:
        """The menu text of ``method`` (its name when the menu does not offer it)."""
        return self.choices.get(method, method)


NO_MENU = MethodMenu()  # before (or without) the API's specs: no methods to offer


BASIC, EXPERT = "basic", "expert"  # a config field's tiers (the schema's "tier"; expert where it names none)
EXPERT_SECTION = "Expert settings"  # the one expander that holds every expert field
# The basic fields the Launch page asks for with inputs of their own, not from the sections below:
# the method menu, the model chooser (a preset, or a local model, its task and its dataset) and the seeds.
OWN_INPUTS: tuple[str, ...] = ("method", "preset", "model_path", "task", "train_data", "seed")


@dataclass(frozen=True)
class FieldSpec:
    """One form input: the dotted RunConfig path, a short label, and the schema's type,
    default, help text and choices."""

    path: str
    label: str
    # "integer" | "number" | "boolean" | "string" | "choice" | "optional_integer" (a nullable
    # integer whose 0 means something: empty = null, e.g. resources.gpus_per_node: empty = auto, 0 = none)
    type: str = "number"
    default: Any = None
    help: str = ""
    choices: tuple[Any, ...] = ()
    nullable: bool = False  # the schema allows null (e.g. train_size: null = the infinite stream)
    tier: str = EXPERT  # the schema's: basic (shown first) or expert (behind the form's one expander)


def from_widget(spec: FieldSpec, value: Any) -> Any:
    """The request value of a widget's ``value``: a nullable integer left at 0 is null (a number
    input cannot be empty, and 0 is below those counts' minimum); an optional integer's text is
    null when empty, else the integer it spells (anything else goes as typed, for the API's 422)."""
    if spec.type == "optional_integer":
        text = str(value or "").strip()
        return None if not text else int(text) if text.isdigit() else text
    return None if spec.nullable and spec.type == "integer" and value == 0 else value


# (path, label) per section; the method decides which sections are shown.
COMMON_FIELDS: tuple[tuple[str, str], ...] = (
    ("steps", "steps"), ("batch_prompts", "batch (prompts per step)"), ("n_total", "n_total (rollouts per prompt)"),
    ("optim.lr", "learning rate"),
)
CLIP_FIELDS: tuple[tuple[str, str], ...] = (("clip_eps", "clip eps"),)
ADVANCED_FIELDS: tuple[tuple[str, str], ...] = (
    ("temperature", "temperature"), ("max_new_tokens", "max new tokens"), ("eval_every", "eval every (steps)"),
    ("eval_temperature", "eval temperature"),
    ("eval_n", "eval samples per problem (k)"), ("eval_problems", "eval problems per benchmark"),
    ("checkpoint_every", "checkpoint every (steps)"), ("entropy_coef", "entropy coef"), ("kl_coef", "KL coef"),
    ("device", "device"), ("engine", "training engine"),
)
# asynchronous training (trainer/spec/offpolicy.py); every method the API accepts off-policy shows it,
# and the API refuses, naming the field, what cannot run it (verl, the vLLM sampler)
OFFPOLICY_FIELDS: tuple[tuple[str, str], ...] = (
    ("offpolicy.max_staleness", "max staleness k (steps ahead)"), ("offpolicy.correction", "off-policy correction"),
    ("offpolicy.is_cap", "importance weight cap C"),
)
OFFPOLICY_SECTION = "Asynchronous training"
RESOURCE_FIELDS: tuple[tuple[str, str], ...] = (
    ("resources.gpus_per_node", "GPUs per node (empty = auto)"), ("resources.nodes", "nodes"),
    ("resources.rollout_tp", "rollout tensor parallelism"),
)


FALLBACK_HELP: dict[str, str] = {  # for fields whose schema has no description
    "steps": "Training steps; each samples batch_prompts prompts and up to n_total rollouts per prompt.",
    "temperature": "Sampling temperature of rollouts (paper: 1.0).",
    "seed": "Random seed (data order, sampling, initialisation of the update).",
}


def sections_for(menu: MethodMenu, methods: Sequence[str]) -> dict[str, tuple[tuple[str, str], ...]]:
    """Form sections to show for the chosen method(s), from their specs in ``menu`` (GET
    /api/methods): each config section a chosen method reads, with the inputs its method module
    declares, once, in method order; the PPO clip for a symmetric clip; then asynchronous
    training, resources and the advanced fields."""
    specs = [menu.specs.get(m, {}) for m in methods]
    out: dict[str, tuple[tuple[str, str], ...]] = {"Training": COMMON_FIELDS}
    for spec in specs:
        for sec in spec.get("sections", ()):
            out.setdefault(str(sec["title"]), tuple((str(path), str(label)) for path, label in sec["form"]))
    if any(s.get("clip", "symmetric") == "symmetric" for s in specs):
        out["Policy update"] = CLIP_FIELDS
    out[OFFPOLICY_SECTION] = OFFPOLICY_FIELDS
    out["Resources"] = RESOURCE_FIELDS
    out["Advanced"] = ADVANCED_FIELDS
    return out


def _resolve(doc: Mapping[str, Any], schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """Follow one ``$ref`` (or a single-``$ref`` allOf/anyOf) into components.schemas."""
    ref = schema.get("$ref")
    if ref is None:
        for key in ("allOf", "anyOf"):
            refs = [s for s in schema.get(key, ()) if "$ref" in s]
            if len(refs) == 1:
                ref = refs[0]["$ref"]
    if ref is None:
        return schema
    return doc["components"]["schemas"][ref.rsplit("/", 1)[-1]]


resolve = _resolve  # public: dashboard/expert_fields.py walks the blocks too


def field_schema(doc: Mapping[str, Any], path: str) -> Mapping[str, Any] | None:
    """The OpenAPI property schema of a dotted RunConfig path, or None when absent."""
    node: Mapping[str, Any] = doc["components"]["schemas"]["RunConfig"]
    for i, part in enumerate(path.split(".")):
        prop = (node.get("properties") or {}).get(part)
        if prop is None:
            return None
        if i == len(path.split(".")) - 1:
            return prop
        node = _resolve(doc, prop)
    return None


def field_spec(doc: Mapping[str, Any], path: str, label: str) -> FieldSpec | None:
    """A :class:`FieldSpec` from the schema (type, default, description, enum)."""
    prop = field_schema(doc, path)
    if prop is None:
        return None
    choices = tuple(prop.get("enum") or next((sub["enum"] for sub in prop.get("anyOf", ()) if "enum" in sub), ()))
    typ = "choice" if choices else prop.get("type") or next((s.get("type") for s in prop.get("anyOf", ()) if s.get("type") != "null"), "string")
    nullable = any(sub.get("type") == "null" for sub in prop.get("anyOf", ()))
    if nullable and typ == "integer" and any(s.get("minimum") == 0 for s in prop.get("anyOf", ())):
        typ = "optional_integer"
    return FieldSpec(path, label, typ, prop.get("default"), prop.get("description") or FALLBACK_HELP.get(path, ""), choices,
                     nullable, str(prop.get("tier") or EXPERT))


def basic_paths(doc: Mapping[str, Any]) -> list[str]:
    """The dotted paths of RunConfig's basic fields (the schema's ``"tier": "basic"``), through
    its blocks (optim, aero, ...), in the schema's order."""
    def walk(node: Mapping[str, Any], prefix: str) -> list[str]:
        out: list[str] = []
        for name, prop in (node.get("properties") or {}).items():
            sub = _resolve(doc, prop)
            if sub is not prop and "properties" in sub:  # a block: its fields have the tiers
                out += walk(sub, f"{prefix}{name}.")
            elif prop.get("tier") == BASIC:
                out.append(prefix + name)
        return out
    return walk(doc["components"]["schemas"]["RunConfig"], "")


def tiered(sections: Mapping[str, Sequence[FieldSpec]]) -> tuple[list[FieldSpec], dict[str, list[FieldSpec]]]:
    """(the basic fields of ``sections`` in their order, {section: its expert fields}), for the
    form's top and its one expander (a section without expert fields is left out)."""
    basic = [s for specs in sections.values() for s in specs if s.tier == BASIC]
    expert = {name: [s for s in specs if s.tier != BASIC] for name, specs in sections.items()}
    return basic, {name: specs for name, specs in expert.items() if specs}


def preset_defaults(doc: Mapping[str, Any], preset: str) -> dict[str, Any]:
    """The dotted fields an installed model's preset fills in when a config leaves them out (the
    schema's ``x-preset-defaults``); {} for a shipped preset."""
    prop = field_schema(doc, "preset") or {}
    return dict((prop.get("x-preset-defaults") or {}).get(preset) or {})


def preset_tasks(doc: Mapping[str, Any], preset: str) -> list[str]:
    """The tasks an installed model's preset serves (the schema's ``x-preset-tasks``); [] for a
    shipped preset, which serves the one it was trained on."""
    prop = field_schema(doc, "preset") or {}
    return list((prop.get("x-preset-tasks") or {}).get(preset) or [])


def form_specs(doc: Mapping[str, Any], menu: MethodMenu, methods: Sequence[str]) -> dict[str, list[FieldSpec]]:
    """{section: [FieldSpec]} for the chosen methods of ``menu`` (fields the schema lacks are
    skipped; a field two sections declare, e.g. train_size, goes in the first, one input per field)."""
    out, seen = {}, set()
    for section, fields in sections_for(menu, methods).items():
        specs = [s for s in (field_spec(doc, p, lab) for p, lab in fields if p not in seen) if s is not None]
        seen |= {s.path for s in specs}
        if specs:
            out[section] = specs
    return out


def parse_list(text: str, cast=str) -> list:
    """'0, 1,2' -> [0, 1, 2] with ``cast=int``; blanks dropped. Raises ValueError on junk."""
    return [cast(x.strip()) for x in (text or "").replace(";", ",").split(",") if x.strip()]


STALENESS_SWEEP = "offpolicy.max_staleness"  # the one config field the Launch form sweeps besides methods and seeds


def swept(config: Mapping[str, Any], path: str, values: Sequence[Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(flat config, sweep overrides) for ``values`` of the dotted field ``path``: none leaves the
    config as it is; one value is set in the config (a single run stays a run); several become
    one override each (``[{"offpolicy.max_staleness": 0}, {...: 1}]``), the form's value of the
    field then being the sweep base's."""
    if len(values) == 1:
        return {**config, path: values[0]}, []
    return dict(config), [{path: v} for v in values]


def submission(methods: Sequence[str], seeds: Sequence[int], config: Mapping[str, Any], *, name: str = "",
               tags: Sequence[str] = (), overrides: Sequence[Mapping[str, Any]] = ()) -> tuple[str, dict[str, Any]]:
    """("run", body for POST /runs) for one method, at most one seed and no overrides, else
    ("sweep", body for POST /sweeps) over overrides x methods x seeds (the same rule as ``aero submit``)."""
    name = name.strip()
    if len(methods) == 1 and len(seeds) <= 1 and not overrides:
        cfg = {**config, "method": methods[0], **({"seed": seeds[0]} if seeds else {})}
        return "run", {"config": cfg, "tags": list(tags), **({"name": name} if name else {})}
    body: dict[str, Any] = {"base": dict(config), "methods": list(methods), "tags": list(tags)}
    if seeds:
        body["seeds"] = list(seeds)
    if overrides:
        body["overrides"] = [dict(o) for o in overrides]
    if name:
        body["name"] = name
    return "sweep", body
