"""An installed model is a preset: the config names it, takes its measured defaults unless given,
serves the tasks it lists, and is refused, naming the command to run, where it is not installed."""

import pytest

from trainer.spec.config import ConfigError, parse_run_config
from trainer.methods.spec import method_names
from trainer.models.catalog import MODELS
from trainer.spec.operator_policy import RunPolicy

DEFAULTS = MODELS["smollm2-135m"].defaults


def test_a_bare_preset_trains_arithmetic_with_the_models_defaults():
    cfg = parse_run_config({"preset": "smollm2-135m"})
    assert (cfg.task, cfg.preset, cfg.model_path) == ("arithmetic", "smollm2-135m", None)
    for key, value in DEFAULTS.items():
        head, _, leaf = key.partition(".")
        assert (getattr(getattr(cfg, head), leaf) if leaf else getattr(cfg, head)) == value, key
    assert parse_run_config(cfg.model_dump(mode="json")) == cfg  # stored and re-read unchanged


def test_given_values_win_over_the_models_defaults_and_countdown_is_served():
    cfg = parse_run_config({"preset": "smollm2-135m", "task": "countdown", "max_new_tokens": 7,
                            "optim": {"lr": 3e-4, "warmup_steps": 0}})
    assert (cfg.task, cfg.max_new_tokens, cfg.optim.lr, cfg.optim.warmup_steps) == ("countdown", 7, 3e-4, 0)
    assert cfg.max_prompt_tokens == DEFAULTS["max_prompt_tokens"]


def test_a_task_the_model_does_not_serve_and_a_hostile_block_are_refused_by_field():
    with pytest.raises(ConfigError) as e:
        parse_run_config({"preset": "smollm2-135m", "task": "math", "train_data": "x.jsonl"})
    assert any(f == "task" and "serves the arithmetic and countdown tasks" in m for f, m in e.value.issues)
    with pytest.raises(ConfigError) as e:
        parse_run_config({"preset": "smollm2-135m", "optim": [1, 2]})
    assert [f for f, _ in e.value.issues] == ["optim"]


def test_a_model_not_installed_on_this_host_is_refused_with_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("AERO_MODELS_DIR", str(tmp_path / "none"))
    cfg = parse_run_config({"preset": "smollm2-135m"})  # the schema alone does not look at the host
    with pytest.raises(ConfigError) as e:
        parse_run_config(cfg.model_dump(), RunPolicy())
    (field, msg), = e.value.issues
    assert field == "preset" and "aero models install smollm2-135m" in msg and str(tmp_path / "none") in msg
    parse_run_config({"preset": "tiny"}, RunPolicy())  # the shipped presets need no install


def test_with_the_model_installed_the_policy_admits_it(smollm2):
    assert parse_run_config({"preset": "smollm2-135m"}, RunPolicy()).preset == "smollm2-135m"


@pytest.mark.parametrize("method", ["grpo", "aero", "dapo"])
def test_verl_admits_the_real_model_preset_at_its_defaults(method):
    # verl trains it (tests/trainer/verl/test_real_model.py): the preset's defaults apply there too
    from trainer.spec.config import for_method

    cfg = parse_run_config(for_method({"preset": "smollm2-135m", "engine": "verl", "method": method}, method))
    assert (cfg.max_prompt_tokens, cfg.max_new_tokens, cfg.optim.lr) == (96, 16, 3e-5)


@pytest.mark.parametrize("method", method_names())
def test_every_method_runs_at_the_models_defaults(method):
    from trainer.spec.config import for_method

    cfg = parse_run_config(for_method({"preset": "smollm2-135m", "method": method, "train_size": 64}, method))
    assert (cfg.batch_prompts, cfg.n_total) == (8, 8)
    aero = getattr(cfg, "aero", None)  # the AERO family's section: exploring half the budget
    assert aero is None or (aero.n_explore, aero.n_max) == (4, 16)
