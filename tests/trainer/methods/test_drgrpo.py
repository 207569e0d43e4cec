"""The worked example of adding a method (trainer/methods/drgrpo.py, docs/architecture.md
"Adding a method"): Dr.GRPO trains on the tiny preset, its advantages are r - mean(r) per
group with no std normalisation, its loss sums tokens per sequence, and verl runs it as stock
GRPO without the std."""

import numpy as np
import pytest
import torch

from trainer.embedded.collect import StepContext, collect
from trainer.spec.config import ConfigError, parse_run_config
from trainer.platform.run import run_training
from trainer.methods.spec import get_method
from trainer.platform.sinks import MemorySink
from trainer.embedded.presets import load_setup
from trainer.rollout.base import SamplingParams

SMALL = {"preset": "tiny", "steps": 3, "batch_prompts": 8, "eval_every": 0, "eval_problems": 4, "eval_n": 4,
         "checkpoint_every": 0, "optim": {"lr": 1e-3}}


def test_drgrpo_trains_a_few_steps(tmp_path):
    sink = MemorySink()
    summary = run_training(parse_run_config({**SMALL, "method": "drgrpo"}), tmp_path, sink)
    assert summary["status"] == "completed" and sorted(sink.steps) == [1, 2, 3]
    for m in sink.steps.values():
        assert m["rollout/trained"] == m["rollout/generated"] == 8 * 16  # GRPO's collection: all trained
        assert np.isfinite(m["train/grad_norm"])
    assert any(m["adv/zero_frac"] < 1.0 for m in sink.steps.values())


@pytest.mark.parametrize("adv_estimator", ["grpo", "drgrpo"])
def test_drgrpo_advantages_are_not_divided_by_the_std(adv_estimator):
    cfg = parse_run_config({**SMALL, "method": "drgrpo", "adv_estimator": adv_estimator, "temperature": 3.0})
    setup = load_setup(cfg)
    ctx = StepContext(cfg=cfg, task=setup.task, sampler=setup.sampler, sampling=SamplingParams(3.0, 1.0, 12),
                      gen=torch.Generator().manual_seed(0), rng=np.random.default_rng(0))
    out = collect(ctx, 0)
    r = torch.tensor([x.reward for x in out.train])
    groups = torch.tensor([x.prompt_index for x in out.train])
    expect = torch.cat([r[groups == g] - r[groups == g].mean() for g in groups.unique()])
    assert torch.allclose(out.advantages, expect, atol=1e-6)
    mixed = [g for g in groups.unique() if 0 < r[groups == g].mean() < 1]
    assert mixed, "no group with both outcomes: the check above would not tell std normalisation apart"
    rg = r[groups == mixed[0]]
    grpo = (rg - rg.mean()) / (rg.std() + 1e-6)  # what GRPO's normalisation would give (a binary std is < 0.52)
    assert not torch.allclose(out.advantages[groups == mixed[0]], grpo, atol=1e-3)


def test_drgrpo_spec_loss_and_verl_mapping():
    cfg = parse_run_config({"method": "drgrpo"})
    assert cfg.effective_loss_agg == "seq-mean-token-sum-norm" and get_method("drgrpo").aero is None
    assert get_method("drgrpo").clip_range(cfg) == (cfg.clip_eps, cfg.clip_eps)
    from trainer.verl.overrides import to_overrides

    vcfg = parse_run_config({"method": "drgrpo", "preset": None, "model_path": "/m", "task": "math",
                             "train_data": "/d.jsonl", "engine": "verl"})
    o = dict(x.split("=", 1) for x in to_overrides(vcfg, out_dir="/o", train_file="/t", val_files=[]))
    assert o["algorithm.norm_adv_by_std_in_grpo"] == "false" and o["algorithm.adv_estimator"] == "grpo"
    assert o["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-sum-norm"
    assert o["actor_rollout_ref.rollout.n"] == "16" and get_method("drgrpo").verl.stock_fit


def test_drgrpo_has_one_route():
    """GRPO with Dr.GRPO's estimator is the drgrpo method: refused at submit, naming the method
    and the loss aggregation that keeps GRPO's; a method with no Dr.GRPO of its own keeps the
    estimator choice (AERO's ablation here)."""
    with pytest.raises(ConfigError) as e:
        parse_run_config({"method": "grpo", "adv_estimator": "drgrpo"})
    assert e.value.issues == [("adv_estimator", "method grpo with adv_estimator=drgrpo is the drgrpo method: set "
                               "method=drgrpo (with loss_agg=seq-mean-token-mean to keep grpo's loss aggregation)")]
    with pytest.raises(ConfigError, match=r"set method=drgrpo$"):  # its loss_agg already given: nothing to add
        parse_run_config({"method": "grpo", "adv_estimator": "drgrpo", "loss_agg": "token-mean"})
    assert not get_method("aero-s1s2").divides_by_std(parse_run_config({"method": "aero-s1s2", "adv_estimator": "drgrpo"}))
    assert get_method("drgrpo").adv_estimator(parse_run_config({"method": "drgrpo"})).key == "drgrpo"


def test_estimators_are_registered_by_key_and_the_config_offers_exactly_them():
    import typing

    from trainer.spec.config import RunConfig
    from trainer.core.estimators import ADV_ESTIMATORS, get_adv_estimator

    assert set(typing.get_args(RunConfig.model_fields["adv_estimator"].annotation)) == set(ADV_ESTIMATORS)
    r, g = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 0, 1, 1])
    assert torch.allclose(get_adv_estimator("drgrpo").estimate(r, g), torch.tensor([2 / 3, -1 / 3, -1 / 3, 0, 0]))
    std = torch.tensor([1.0, 0.0, 0.0]).std()
    assert torch.allclose(get_adv_estimator("grpo").estimate(r, g)[:3], torch.tensor([2 / 3, -1 / 3, -1 / 3]) / (std + 1e-6))
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'; known: grpo, drgrpo"):
        get_adv_estimator("ppo")
