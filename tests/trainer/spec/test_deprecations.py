"""Renamed and moved run-config fields (trainer/spec/config_renames.py, via trainer.spec.config): the
generation settings are the ``rollout`` block's (``sampler``, ``rollout_decode``, ``sampler_rng``
and ``aero.schedule`` are ``rollout.sampler``, ``rollout.decode``, ``rollout.rng`` and
``rollout.schedule``), and ``rollout_engine`` ("embedded" | "vllm") is ``rollout.sampler`` ("hf" |
"vllm"). An old field, nested or dotted, is read as the new one with a DeprecationWarning naming
it, the parsed config is the one the new field gives, and a config whose two spellings disagree
is refused naming the old field."""

from __future__ import annotations

import warnings

import pytest

from trainer.spec.config import ConfigError, RunConfig, SharedConfig, parse_run_config
from trainer.spec.config_renames import RENAMED_FIELDS, ConfigDeprecationWarning, renamed_fields

MOVED = [  # (old config, the same config in the new fields)
    ({"rollout_engine": "embedded"}, {"rollout": {"sampler": "hf"}}),
    ({"rollout_engine": "vllm"}, {"rollout": {"sampler": "vllm"}}),
    ({"sampler": "vllm"}, {"rollout": {"sampler": "vllm"}}),
    ({"rollout_decode": "static"}, {"rollout": {"decode": "static"}}),
    ({"sampler_rng": "per-row"}, {"rollout": {"rng": "per-row"}}),
    ({"sampler_rng": "per-row", "aero": {"schedule": "continuous", "k": 2}},
     {"rollout": {"rng": "per-row", "schedule": "continuous"}, "aero": {"k": 2}}),
]


@pytest.mark.parametrize("old,new", MOVED, ids=lambda c: ",".join(c))
def test_an_old_field_is_read_as_the_new_one_with_a_deprecation_warning(old, new):
    with pytest.warns(DeprecationWarning, match="is deprecated: use rollout\\."):
        cfg = parse_run_config({"method": "aero", **old})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new fields warn about nothing
        assert cfg == parse_run_config({"method": "aero", **new})
    dumped = cfg.model_dump(mode="json")
    assert not {"rollout_engine", "sampler", "rollout_decode", "sampler_rng"} & set(dumped)  # stored under the new names
    assert "schedule" not in dumped["aero"]
    with pytest.warns(ConfigDeprecationWarning):
        assert SharedConfig.model_validate(old).rollout == cfg.rollout  # a sweep's base
    with pytest.warns(ConfigDeprecationWarning):
        assert RunConfig(**old).rollout == cfg.rollout  # keywords too


def test_the_warning_names_both_places_and_values():
    with pytest.warns(DeprecationWarning, match="rollout_engine is deprecated: use rollout.sampler .*rollout_engine="
                                                "embedded is rollout.sampler=hf"):
        parse_run_config({"rollout_engine": "embedded"})
    with pytest.warns(DeprecationWarning, match="aero.schedule is deprecated: use rollout.schedule"):
        parse_run_config({"method": "aero", "sampler_rng": "per-row", "aero": {"schedule": "continuous"}})


def test_both_spellings_agreeing_are_accepted_and_disagreeing_refused_naming_the_old_field():
    with pytest.warns(ConfigDeprecationWarning):
        assert parse_run_config({"rollout_engine": "embedded", "rollout": {"sampler": "hf"}}).rollout.sampler == "hf"
    with pytest.raises(ConfigError) as err:
        parse_run_config({"rollout_engine": "vllm", "rollout": {"sampler": "hf"}})
    assert err.value.issues == [("rollout_engine", "moved to rollout.sampler, which is given too: rollout_engine=vllm "
                                 "is rollout.sampler=vllm, not rollout.sampler=hf; give rollout.sampler alone")]
    with pytest.raises(ConfigError) as err:
        parse_run_config({"method": "aero", "aero": {"schedule": "calls"}, "rollout": {"schedule": "continuous"}})
    assert [loc for loc, _ in err.value.issues] == ["aero.schedule"]
    for bad in ("hf", "nope", ["vllm"]):  # not one of the old field's values: refused under the old name
        with pytest.raises(ConfigError) as err:
            parse_run_config({"rollout_engine": bad})
        assert [loc for loc, _ in err.value.issues] == ["rollout_engine"]
        assert "give rollout.sampler=hf or rollout.sampler=vllm" in err.value.issues[0][1]
    with pytest.raises(ConfigError) as err:
        parse_run_config({"sampler_rng": "sometimes"})
    assert [loc for loc, _ in err.value.issues] == ["sampler_rng"]
    with pytest.raises(ConfigError) as err:  # the block is not an object: refused, never silently replaced
        parse_run_config({"sampler": "hf", "rollout": 5})
    assert "sampler" in [loc for loc, _ in err.value.issues]


def test_the_schema_has_the_new_fields_only():
    for model in (RunConfig, SharedConfig):
        schema = model.model_json_schema()
        props = schema["properties"]
        assert not {"rollout_engine", "sampler", "rollout_decode", "sampler_rng"} & set(props)
        block = schema["$defs"]["RolloutConfig"]["properties"]
        assert block["sampler"]["enum"] == ["hf", "vllm"] and block["sampler"]["default"] == "hf"
        assert set(block) == {"sampler", "decode", "rng", "schedule"}
        assert "schedule" not in schema["$defs"]["AEROConfig"]["properties"]
    with pytest.raises(ConfigError, match="rollout.sampler"):
        parse_run_config({"rollout": {"sampler": "embedded"}})  # the old value under the new name is not a sampler


def test_renamed_fields_moves_what_it_can_and_leaves_the_rest():
    assert set(RENAMED_FIELDS) == {"rollout_engine", "sampler", "rollout_decode", "sampler_rng", "aero.schedule"}
    with pytest.warns(ConfigDeprecationWarning):
        assert renamed_fields({"rollout_engine": "embedded", "steps": 3}) == {"steps": 3, "rollout": {"sampler": "hf"}}
    with pytest.warns(ConfigDeprecationWarning):  # dotted, as a sweep override or --set gives it
        assert renamed_fields({"aero.schedule": "continuous"}) == {"rollout": {"schedule": "continuous"}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert renamed_fields({"rollout": {"sampler": "vllm"}}) == {"rollout": {"sampler": "vllm"}}
        conflict = {"rollout_engine": "vllm", "rollout": {"sampler": "hf"}}
        assert renamed_fields(conflict) == conflict  # left for the model to refuse
