"""RunConfig -> verl 0.9.1 hydra overrides: the mapping per method, the legacy reward keys verl
silently ignores, and (with verl installed) hydra compose + verl's own validate_config."""

import pytest

from trainer.spec.config import ConfigError, parse_run_config
from trainer.verl.overrides import REWARD_FN, check_no_legacy_reward, to_overrides

BASE = {"preset": None, "model_path": "/models/qwen2.5-math-1.5b", "task": "math", "train_data": "/data/train.jsonl",
        "engine": "verl", "batch_prompts": 8, "n_total": 16, "max_prompt_tokens": 1024, "max_new_tokens": 1536,
        "optim": {"lr": 5e-6}}


def overrides(**kw):
    cfg = parse_run_config({**BASE, **kw})
    return to_overrides(cfg, out_dir="/runs/7", train_file="/runs/7/verl_data/train.parquet",
                        val_files=["/runs/7/verl_data/val_0.parquet"], n_gpus_per_node=4)


def as_dict(ovs):
    return dict(o.split("=", 1) for o in ovs)


def test_aero_explores_with_n_explore_on_the_verifier_reward():
    o = as_dict(overrides(method="aero"))
    assert o["actor_rollout_ref.rollout.n"] == "8"
    assert o["reward.reward_manager.name"] == "naive"  # the curated loop trains on the step's advantages
    assert o["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-mean"
    assert o["actor_rollout_ref.actor.loss_scale_factor"] == "1536"  # Dr.GRPO's constant: the generation budget
    assert (o["actor_rollout_ref.actor.clip_ratio_low"], o["actor_rollout_ref.actor.clip_ratio_high"]) == ("0.2", "0.2")
    assert o["trainer.use_v1"] == "false"  # the RayPPOTrainer path
    assert o["+aero_lab.out_dir"] == "/runs/7"


def test_grpo_and_dapo_settings():
    g = as_dict(overrides(method="grpo"))
    assert (g["actor_rollout_ref.rollout.n"], g["algorithm.adv_estimator"]) == ("16", "grpo")
    assert "algorithm.filter_groups.enable" not in g and g["reward.reward_manager.name"] == "naive"
    d = as_dict(overrides(method="dapo", dapo={"max_gen_rounds": 3, "overlong_buffer": 256}))
    assert (d["actor_rollout_ref.actor.clip_ratio_low"], d["actor_rollout_ref.actor.clip_ratio_high"]) == ("0.2", "0.28")
    assert d["actor_rollout_ref.actor.loss_agg_mode"] == "token-mean"
    # dynamic sampling and overlong shaping are the DAPO step's (as on the embedded engine), not verl's
    assert d["reward.reward_manager.name"] == "naive"
    assert not [k for k in d if "filter_groups" in k or "overlong_buffer" in k]


def test_sampler_and_cpu_settings():
    o = as_dict(overrides(method="aero"))
    assert o["actor_rollout_ref.rollout.name"] == "aero_hf" and "trainer.device" not in o
    assert as_dict(overrides(method="aero", rollout={"sampler": "vllm"}))["actor_rollout_ref.rollout.name"] == "vllm"
    cfg = parse_run_config({**BASE, "method": "aero"})
    cpu = as_dict(to_overrides(cfg, out_dir="/o", train_file="/t", val_files=[], device="cpu"))
    assert (cpu["trainer.device"], cpu["actor_rollout_ref.actor.strategy"], cpu["reward.num_workers"]) == ("cpu", "fsdp2",
                                                                                                        "1")
    assert cpu["actor_rollout_ref.model.use_remove_padding"] == "false"
    assert cpu["actor_rollout_ref.rollout.agent.num_workers"] == "1"  # replaced, not given twice
    assert cpu["+actor_rollout_ref.model.override_config.attn_implementation"] == "sdpa"


def test_verl_rules_at_submit():
    with pytest.raises(ConfigError, match="std_unbiased"):  # verl's own GRPO estimator is Bessel-corrected
        parse_run_config({**BASE, "method": "grpo", "std_unbiased": False})
    parse_run_config({**BASE, "method": "aero", "std_unbiased": False})  # the curated loop honours it
    parse_run_config({**BASE, "method": "drgrpo", "std_unbiased": False})  # Dr.GRPO never divides by the std
    with pytest.raises(ConfigError, match="rollout.sampler: vLLM needs CUDA"):
        parse_run_config({**BASE, "device": "cpu", "rollout": {"sampler": "vllm"}})
    with pytest.raises(ConfigError, match="task"):
        parse_run_config({**BASE, "task": "code"})
    tiny = parse_run_config({"engine": "verl", "method": "aero"})  # the tiny preset on the arithmetic task
    assert tiny.preset == "tiny" and tiny.task == "arithmetic"


def test_shared_settings_follow_the_run_config():
    o = as_dict(overrides(method="aero", mini_batches=2, shuffle_mini_batches=False, kl_coef=0.01, gradient_checkpointing=True, eval_every=0,
                          checkpoint_every=5, keep_checkpoints=3, steps=40))
    assert o["data.train_batch_size"] == "8" and o["actor_rollout_ref.actor.ppo_mini_batch_size"] == "4"
    assert (o["data.max_prompt_length"], o["data.max_response_length"]) == ("1024", "1536")
    assert o["actor_rollout_ref.actor.optim.lr"] == "5e-06"
    assert o["actor_rollout_ref.actor.use_kl_loss"] == "true" and o["actor_rollout_ref.actor.kl_loss_type"] == "low_var_kl"
    assert o["actor_rollout_ref.model.enable_gradient_checkpointing"] == "true"
    assert (o["trainer.test_freq"], o["trainer.val_before_train"], o["trainer.save_freq"]) == ("40", "false", "5")
    assert o["trainer.max_actor_ckpt_to_keep"] == "4"  # 3 committed + 1 whose step is not yet logged
    assert o["trainer.total_training_steps"] == "40" and o["trainer.n_gpus_per_node"] == "4"
    assert o["actor_rollout_ref.rollout.val_kwargs.n"] == "8" and o["actor_rollout_ref.rollout.val_kwargs.do_sample"] == "true"


def test_reward_goes_through_the_reward_keys_only():
    ovs = overrides(method="aero")
    o = as_dict(ovs)
    assert o["reward.custom_reward_function.path"] == str(REWARD_FN)
    assert o["reward.custom_reward_function.name"] == "compute_score"
    assert not [k for k in o if k.lstrip("+").startswith(("custom_reward_function.", "reward_model."))]
    with pytest.raises(ValueError, match="legacy reward keys"):
        check_no_legacy_reward(ovs + ["custom_reward_function.path=/x.py"])
    with pytest.raises(ValueError, match="reward_model.reward_manager"):
        check_no_legacy_reward(["+reward_model.reward_manager=dapo"])


def test_batch_must_split_into_mini_batches():
    """A rule of the config (trainer.verl.rules.verl_issues): refused at parse, before any override."""
    with pytest.raises(ConfigError, match="mini_batches"):
        parse_run_config({**BASE, "batch_prompts": 6, "mini_batches": 4, "shuffle_mini_batches": False})
    with pytest.raises(ConfigError, match="shuffle_mini_batches"):  # the embedded reshuffle has no verl twin
        parse_run_config({**BASE, "batch_prompts": 8, "mini_batches": 4})


@pytest.mark.parametrize("method", ["grpo", "dapo", "aero", "aero-s1s2"])
def test_hydra_compose_validates(method):
    pytest.importorskip("verl")
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from trainer.verl.overrides import compose

    config = compose(overrides(method=method))
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    assert config.reward.custom_reward_function.path == str(REWARD_FN)
    assert config.custom_reward_function.path is None and config.reward_model.reward_manager is None
    assert config.actor_rollout_ref.rollout.n == (8 if method.startswith("aero") else 16)
    assert config.aero_lab.out_dir == "/runs/7"
    assert config.actor_rollout_ref.actor.loss_scale_factor == 1536


def test_compose_refuses_a_legacy_reward_value():
    pytest.importorskip("verl")
    from trainer.verl.overrides import compose

    with pytest.raises(ValueError, match="legacy"):
        compose(overrides(method="grpo") + ["reward_model.reward_manager=dapo"])


def test_the_runs_trackers_are_verls_own_loggers(monkeypatch):
    monkeypatch.delenv("AERO_TRACKERS", raising=False)
    assert as_dict(overrides(method="grpo"))["trainer.logger"] == '[console]'
    o = as_dict(overrides(method="grpo", trackers=["tensorboard", "wandb"]))
    assert o["trainer.logger"] == '[console,wandb,tensorboard]'
    monkeypatch.setenv("AERO_TRACKERS", "mlflow")  # the operator's are added to every run
    assert as_dict(overrides(method="grpo"))["trainer.logger"] == '[console,mlflow]'
