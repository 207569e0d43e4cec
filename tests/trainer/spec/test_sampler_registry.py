"""The sampler registry (trainer/spec/sampler_registry.py): each spec's references resolve, the rules read
its capabilities (not its name), and a setting a sampler would ignore is refused at submit naming
the field."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from typing import get_args

import pytest

from common.refs import load
from trainer.spec.config import ConfigError, for_method, parse_run_config
from trainer.spec.sampler_registry import SAMPLER_NAMES, SAMPLER_SPECS, RolloutConfig, either, get_sampler, samplers_that

VERL = dict(engine="verl", task="math", preset=None, model_path="/models/q", train_data="/data/t.jsonl",
            shuffle_mini_batches=False)
SHAPE = {"preset": None, "model_shape": "qwen2.5-1.5b", "task": "strata"}


def issues(data: dict) -> dict[str, list[str]]:
    try:
        parse_run_config(data)
    except ConfigError as e:
        out: dict[str, list[str]] = {}
        for field, message in e.issues:
            out.setdefault(field, []).append(message)
        return out
    return {}


def test_the_specs_are_the_configs_choices_and_their_references_resolve():
    from trainer.rollout.static_decode import DECODES
    from trainer.verl.plugins import ROLLOUT_NAME

    assert SAMPLER_NAMES == tuple(get_args(RolloutConfig.model_fields["sampler"].annotation)) == ("hf", "vllm")
    for spec in SAMPLER_SPECS.values():
        assert callable(load(spec.build))
        assert set(spec.cuda_decodes) <= set(spec.decodes) <= set(DECODES) and "dynamic" in spec.decodes
        assert set(spec.devices) <= {"cpu", "cuda"} and spec.devices
        assert (spec.unavailable is None) == (spec.fallback is None)
        if spec.unavailable is not None:
            assert callable(load(spec.unavailable)) and spec.fallback in SAMPLER_SPECS
            assert "cpu" in get_sampler(spec.fallback).devices
    assert get_sampler("hf").verl_rollout == ROLLOUT_NAME  # the rollout our verl plugin registers
    with pytest.raises(ValueError, match="unknown sampler 'nope'"):
        get_sampler("nope")
    assert samplers_that("keyed") == ("hf",) and samplers_that("devices", "cpu") == ("hf",)
    assert samplers_that("decodes", "static") == ("hf",) and either(("hf", "x")) == "rollout.sampler=hf or rollout.sampler=x"


def test_the_registry_loads_without_torch():
    code = "import sys, trainer.spec.sampler_registry, trainer.spec.config; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_defaults_and_honoured_combinations_stay_valid():
    assert issues({}) == {}
    assert issues({"device": "cpu"}) == {}
    for decode in ("dynamic", "static", "graphs"):  # device=auto: graphs run where there is CUDA
        assert issues({"rollout": {"decode": decode}}) == {}
    assert issues({"device": "cuda", "rollout": {"decode": "graphs"}}) == {}
    assert issues({"rollout": {"sampler": "vllm"}}) == {}  # falls back to hf at run time where vLLM cannot run, with a warning
    assert issues({"rollout": {"sampler": "vllm"}, "device": "cpu"}) == {}  # a CPU build of vLLM samples on the CPU
    for method in ("aero", "aero-mem"):  # AERO's step generates in rounds
        assert issues(for_method({"method": method, "train_size": 64,
                                  "rollout": {"rng": "per-row", "schedule": "continuous"}}, method)) == {}
    assert issues({"offpolicy": {"max_staleness": 1}}) == {}


@pytest.mark.parametrize("data,field,words", [
    ({"rollout": {"sampler": "vllm", "decode": "static"}}, "rollout.decode", "vLLM decodes its own way"),
    ({"rollout": {"sampler": "vllm", "decode": "graphs"}}, "rollout.decode",
     "rollout.decode=dynamic with rollout.sampler=vllm"),
    ({"device": "cpu", "rollout": {"decode": "graphs"}}, "rollout.decode", "set rollout.decode=static"),
    ({"rollout": {"sampler": "vllm", "rng": "per-row"}}, "rollout.rng", "per-row keys are the hf sampler's"),
    ({"rollout": {"sampler": "vllm", "rng": "per-row", "schedule": "continuous"}, "method": "aero"},
     "rollout.schedule", "vLLM has no continuous batch: set rollout.sampler=hf"),
    ({"rollout": {"rng": "per-row", "schedule": "continuous"}, "method": "grpo"}, "rollout.schedule",
     "method grpo does not generate in rounds"),
    ({"rollout": {"schedule": "continuous"}, "method": "aero"}, "rollout.schedule", "set rollout.rng=per-row"),
    ({"rollout": {"sampler": "vllm"}, "offpolicy": {"max_staleness": 1}}, "offpolicy.max_staleness",
     "set rollout.sampler=hf"),
    ({**SHAPE, "rollout": {"sampler": "vllm"}}, "rollout.sampler", "use rollout.sampler=hf"),
    ({**VERL, "resources": {"gpus_per_node": 4, "rollout_tp": 2}}, "resources.rollout_tp", "or rollout.sampler=vllm"),
    ({**VERL, "rollout": {"sampler": "vllm"}, "device": "cpu"}, "rollout.sampler", "vLLM needs CUDA; on the CPU the "
     "verl engine rolls out with 'hf'"),
], ids=["vllm-static", "vllm-graphs", "graphs-on-cpu", "vllm-per-row", "vllm-continuous", "grpo-continuous",
        "continuous-stream", "vllm-offpolicy", "vllm-shape", "hf-tp", "vllm-verl-cpu"])
def test_a_setting_the_sampler_would_ignore_is_refused_naming_the_field(data, field, words):
    got = issues(data)
    assert field in got and any(words in m for m in got[field]), got


def test_the_rules_read_capabilities_not_names(monkeypatch):
    """The hf sampler with its capabilities taken away is refused as vLLM is; vLLM given them is not."""
    hf, vllm = SAMPLER_SPECS["hf"], SAMPLER_SPECS["vllm"]
    monkeypatch.setitem(SAMPLER_SPECS, "hf", replace(hf, keyed=False, decodes=("dynamic",), runs_ahead=False,
                                                     stream=False, from_model_dir=True, devices=("cuda",)))
    monkeypatch.setitem(SAMPLER_SPECS, "vllm", replace(vllm, keyed=True, decodes=hf.decodes, runs_ahead=True,
                                                       stream=True, from_model_dir=False, devices=hf.devices))
    got = issues({"rollout": {"rng": "per-row", "decode": "static", "schedule": "continuous"},
                  "offpolicy": {"max_staleness": 1}, "method": "aero"})
    assert {"rollout.rng", "rollout.decode", "offpolicy.max_staleness", "rollout.schedule"} <= set(got), got
    assert "rollout.sampler" in issues({**SHAPE})
    assert issues({"rollout": {"sampler": "vllm", "rng": "per-row", "decode": "static", "schedule": "continuous"},
                   "offpolicy": {"max_staleness": 1}, "method": "aero"}) == {}
    assert issues({**SHAPE, "rollout": {"sampler": "vllm"}}) == {}


def test_the_embedded_engine_falls_back_by_the_spec(monkeypatch):
    import torch

    from trainer.embedded.presets import sampler_name

    cfg = parse_run_config({"rollout": {"sampler": "vllm"}})
    monkeypatch.setattr("trainer.rollout.vllm.unavailable", lambda device: "no vLLM here")
    assert sampler_name(cfg, torch.device("cpu")) == ("hf", "no vLLM here; falling back to the hf sampler")
    monkeypatch.setattr("trainer.rollout.vllm.unavailable", lambda device: None)
    assert sampler_name(cfg, torch.device("cpu")) == ("vllm", None)
    assert sampler_name(parse_run_config({}), torch.device("cpu")) == ("hf", None)
