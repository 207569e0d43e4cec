"""Validation that cannot crash: every field of the run config and of each of its sections is
untrusted input. Whatever value a client sends (a list, a dict, deep nesting, a huge number,
an odd string), parsing refuses it with a ConfigError that names fields, or accepts it; it never
raises anything else (a TypeError from a model validator is a 500 at the API)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainer.spec.config import ConfigError, RunConfig, parse_run_config
from trainer.methods.spec import all_sections

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([10**400, -(10**400), 2**63, float("inf"), float("-inf"), float("nan"), 1e308]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40), st.sampled_from(["", "\x00", "../../etc/passwd", "é" * 5000, "grpo\n", "aero ", "TINY"]))
HOSTILE = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                       max_leaves=12)
DEEP = st.integers(min_value=50, max_value=400).map(lambda n: _nest(n))

TOP = sorted(RunConfig.model_fields)
SECTIONS = {sec.name: sorted(sec.model.model_fields) for sec in all_sections()}
SECTION_LEAVES = [(s, f) for s, fields in SECTIONS.items() for f in fields]


def _nest(n: int):
    value: object = "x"
    for _ in range(n):
        value = [value]
    return value


def refused_or_accepted(data: dict) -> None:
    try:
        parse_run_config(data)
    except ConfigError as e:
        assert e.issues and all(isinstance(f, str) and f and isinstance(m, str) for f, m in e.issues), e.issues


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(TOP), value=st.one_of(HOSTILE, DEEP))
def test_any_value_of_any_top_level_field_is_refused_by_name_or_accepted(field, value):
    refused_or_accepted({field: value})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(leaf=st.sampled_from(SECTION_LEAVES), value=st.one_of(HOSTILE, DEEP),
       method=st.sampled_from(["aero", "grpo", "dapo", "knapsack", "speed"]))
def test_any_value_inside_any_section_is_refused_by_name_or_accepted(leaf, value, method):
    section, field = leaf
    refused_or_accepted({"method": method, section: {field: value}})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.dictionaries(st.sampled_from(TOP), HOSTILE, max_size=6))
def test_several_hostile_fields_at_once(data):
    refused_or_accepted(data)


@pytest.mark.parametrize("value", [[], ["arithmetic"], {"a": 1}, _nest(300), 10**400])
@pytest.mark.parametrize("field", ["task", "preset", "method", "model_path", "engine"])
def test_the_fields_model_validators_read_first_are_refused_by_name(field, value):
    # these are read by model validators before pydantic checks their types (the task case
    # answered 500 at POST /api/runs)
    with pytest.raises(ConfigError) as e:
        parse_run_config({field: value})
    assert any(f.split(".")[0] == field for f, _ in e.value.issues), e.value.issues
