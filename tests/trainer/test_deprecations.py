"""Renamed run-config fields (trainer/config_renames.py, via trainer.config): ``rollout_engine``
("embedded" | "vllm") is ``sampler`` ("hf" | "vllm"). The old field is read as the new one with
a DeprecationWarning naming it, the parsed config is the one the new field gives, and a config
whose two spellings disagree is refused naming the old field."""

from __future__ import annotations

import warnings

import pytest

from trainer.config import (RENAMED_FIELDS, ConfigDeprecationWarning, ConfigError, RunConfig, SharedConfig,
                            parse_run_config, renamed_fields)


@pytest.mark.parametrize("old,new", [("embedded", "hf"), ("vllm", "vllm")])
def test_rollout_engine_is_read_as_sampler_with_a_deprecation_warning(old, new):
    with pytest.warns(DeprecationWarning, match=f"rollout_engine is deprecated: use sampler .*rollout_engine={old} "
                                                f"is sampler={new}"):
        cfg = parse_run_config({"method": "grpo", "rollout_engine": old})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new field warns about nothing
        assert cfg == parse_run_config({"method": "grpo", "sampler": new})
    dumped = cfg.model_dump(mode="json")
    assert dumped["sampler"] == new and "rollout_engine" not in dumped  # stored under the new name
    with pytest.warns(ConfigDeprecationWarning):
        assert SharedConfig.model_validate({"rollout_engine": old}).sampler == new  # a sweep's base
    with pytest.warns(ConfigDeprecationWarning):
        assert RunConfig(rollout_engine=old).sampler == new  # keywords too


def test_both_spellings_agreeing_are_accepted_and_disagreeing_refused_naming_the_old_field():
    with pytest.warns(ConfigDeprecationWarning):
        assert parse_run_config({"rollout_engine": "embedded", "sampler": "hf"}).sampler == "hf"
    with pytest.raises(ConfigError) as err:
        parse_run_config({"rollout_engine": "vllm", "sampler": "hf"})
    assert err.value.issues == [("rollout_engine", "renamed to sampler, which is given too: rollout_engine=vllm is "
                                 "sampler=vllm, not sampler=hf; give sampler alone")]
    for bad in ("hf", "nope", ["vllm"]):  # not one of the old field's values: refused under the old name
        with pytest.raises(ConfigError) as err:
            parse_run_config({"rollout_engine": bad})
        assert [loc for loc, _ in err.value.issues] == ["rollout_engine"]
        assert "give sampler=hf or vllm" in err.value.issues[0][1]


def test_the_schema_has_the_new_field_and_values_only():
    for model in (RunConfig, SharedConfig):
        props = model.model_json_schema()["properties"]
        assert props["sampler"]["enum"] == ["hf", "vllm"] and props["sampler"]["default"] == "hf"
        assert "rollout_engine" not in props
    with pytest.raises(ConfigError, match="sampler"):
        parse_run_config({"sampler": "embedded"})  # the old value under the new name is not a sampler


def test_renamed_fields_moves_what_it_can_and_leaves_the_rest():
    assert set(RENAMED_FIELDS) == {"rollout_engine"}
    with pytest.warns(ConfigDeprecationWarning):
        assert renamed_fields({"rollout_engine": "embedded", "steps": 3}) == {"steps": 3, "sampler": "hf"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert renamed_fields({"sampler": "vllm"}) == {"sampler": "vllm"}
        conflict = {"rollout_engine": "vllm", "sampler": "hf"}
        assert renamed_fields(conflict) == conflict  # left for the model to refuse
