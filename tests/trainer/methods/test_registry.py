"""The method registry (trainer/methods/spec.py): every method is known by its spec, unknown
names are refused naming the valid ones, the config and the verl mapping read the specs."""

import json
import subprocess
import sys

import pytest

from trainer.spec.config import METHODS, ConfigError, RunConfig, parse_run_config
from trainer.methods.spec import Display, MethodSpec, get_method, get_step, method_names, register, specs


def test_builtin_methods_in_display_order():
    assert method_names()[:5] == ("grpo", "dapo", "aero", "aero-s1", "aero-s1s2")
    assert "drgrpo" in method_names() and METHODS == method_names()


def test_unknown_method_names_the_valid_ones():
    with pytest.raises(ValueError) as e:
        get_method("ppo")
    assert "'ppo'" in str(e.value) and all(m in str(e.value) for m in method_names())
    with pytest.raises(ValueError):
        get_step("ppo")


def test_every_spec_serialises_to_json():
    for spec in specs():
        doc = json.loads(json.dumps(spec.to_json()))
        assert doc["name"] == spec.name and set(doc["strategies"]) == {"s1", "s2", "s3"}
        assert doc["strategies"] == (spec.aero.to_json() if spec.aero else dict.fromkeys(("s1", "s2", "s3"), False))
        assert doc["colour"].startswith("#") and len(doc["colour"]) == 7
        assert callable(get_step(spec.name))
    assert len({s.display.colour for s in specs()}) == len(specs())


def test_a_name_registers_once():
    spec = get_method("grpo")
    assert register(spec, get_step("grpo")) is spec  # the same spec again: a no-op
    with pytest.raises(ValueError, match="already registered"):
        register(MethodSpec(name="grpo", family="x", display=Display("x", "#000000", "x", order=0)), print)


def test_config_delegates_to_the_spec():
    assert RunConfig(method="dapo").effective_loss_agg == "token-mean"
    assert RunConfig(method="aero").effective_loss_agg == "seq-mean-token-mean"
    assert RunConfig(method="dapo", loss_agg="seq-mean-token-mean").effective_loss_agg == "seq-mean-token-mean"
    cfg = RunConfig(method="dapo", clip_eps=0.1)
    assert get_method("dapo").clip_range(cfg) == (cfg.dapo.eps_low, cfg.dapo.eps_high)
    assert get_method("aero").clip_range(cfg) == (0.1, 0.1)


def test_unknown_method_is_a_config_error_listing_the_methods():
    with pytest.raises(ConfigError) as e:
        parse_run_config({"method": "ppo"})
    (loc, msg), = e.value.issues
    assert loc == "method" and msg.startswith("Input should be 'grpo', 'dapo'") and "'aero-s1s2'" in msg
    prop = RunConfig.model_json_schema()["properties"]["method"]
    assert prop["enum"] == list(method_names()) and prop["default"] == "aero"


def test_registry_loads_without_torch():
    code = ("import sys, trainer.methods.spec as s; s.specs(); import trainer.spec.config; "
            "print([m for m in ('torch',) if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_verl_mapping_follows_the_spec():
    from trainer.verl.overrides import to_overrides

    def ov(**kw):
        cfg = RunConfig(preset=None, model_path="/m", task="math", train_data="/d.jsonl", engine="verl", **kw)
        return dict(o.split("=", 1) for o in to_overrides(cfg, out_dir="/o", train_file="/t", val_files=[]))

    aero, dapo, grpo = ov(method="aero"), ov(method="dapo"), ov(method="grpo")
    assert aero["actor_rollout_ref.rollout.n"] == "8" and grpo["actor_rollout_ref.rollout.n"] == "16"
    assert grpo["algorithm.adv_estimator"] == "grpo"
    assert dapo["actor_rollout_ref.actor.clip_ratio_high"] == "0.28" and dapo["reward.reward_manager.name"] == "naive"
    assert grpo["algorithm.norm_adv_by_std_in_grpo"] == "true"
    assert ov(method="drgrpo")["algorithm.norm_adv_by_std_in_grpo"] == "false"
    assert ov(method="aero-s1s2", adv_estimator="drgrpo")["algorithm.norm_adv_by_std_in_grpo"] == "false"
