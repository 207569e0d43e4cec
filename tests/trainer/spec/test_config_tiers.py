"""Every config field is basic or expert (trainer/spec/config_types.py): each leaf of RunConfig and of
its blocks has a tier, the JSON schema (and so the API's OpenAPI schema, which the Launch form
reads) names it on the field's property, about fifteen are basic, and docs/api.md lists them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from trainer.spec.config import RunConfig, SharedConfig, parse_run_config
from trainer.spec.config_types import TIERS, basic, leaf_tiers

ROOT = Path(__file__).resolve().parents[3]


def schema_tiers(schema: dict[str, Any]) -> dict[str, Any]:
    """{dotted path: the "tier" of its property (None when absent)} of every leaf of a model's
    JSON schema, through the blocks its properties refer to."""
    defs = schema.get("$defs", {})

    def block(prop: dict[str, Any]) -> dict[str, Any] | None:
        refs = [prop] if "$ref" in prop else [s for s in prop.get("anyOf", ()) if "$ref" in s]
        return defs[refs[0]["$ref"].rsplit("/", 1)[-1]] if len(refs) == 1 else None

    def walk(node: dict[str, Any], prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, prop in node["properties"].items():
            sub = block(prop)
            if sub is not None:
                assert "tier" not in prop, f"{prefix}{name}: a block has no tier of its own"
                out.update(walk(sub, f"{prefix}{name}."))
            else:
                out[prefix + name] = prop.get("tier")
        return out

    return walk(schema, "")


@pytest.mark.parametrize("model", [RunConfig, SharedConfig])
def test_every_leaf_field_has_a_tier_and_the_schema_names_it(model):
    tiers = leaf_tiers(model)
    assert len(tiers) > 100 and set(tiers.values()) == set(TIERS)
    assert {"optim.beta2", "aero.tau", "resources.nodes", "offpolicy.is_cap", "alerts.rules", "code.memory_mb"} <= set(tiers)
    assert schema_tiers(model.model_json_schema()) == tiers  # every leaf, none missing, none extra


def test_about_fifteen_fields_are_basic():
    basic_ = [path for path, tier in leaf_tiers(RunConfig).items() if tier == "basic"]
    assert 12 <= len(basic_) <= 20, basic_
    assert {"method", "task", "preset", "steps", "seed", "n_total", "optim.lr", "aero.n_explore"} <= set(basic_)
    assert leaf_tiers(SharedConfig) == leaf_tiers(RunConfig)


def test_a_tier_changes_no_validation():
    cfg = parse_run_config({"aero": {"tau": 0.4}, "optim": {"beta2": 0.99}, "steps": 3})
    assert (cfg.aero.tau, cfg.optim.beta2, cfg.steps) == (0.4, 0.99, 3)
    assert basic(x=1) == {"tier": "basic", "x": 1} and basic() is not basic()  # a fresh dict per field


def test_the_docs_list_the_basic_fields():
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("### Config fields: basic and expert", 1)[1].split("\n### ", 1)[0]
    listed = re.findall(r"^\| `([\w.]+)` \|", section, flags=re.MULTILINE)
    assert listed == [p for p, tier in leaf_tiers(RunConfig).items() if tier == "basic"], \
        "docs/api.md's table of basic fields is out of date"
