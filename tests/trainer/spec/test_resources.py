"""A run's resources: defaults, submit-time rules, operator caps (trainer/spec/resources.py)."""

from __future__ import annotations

import pytest

from trainer.spec.config import ConfigError, parse_run_config
from trainer.spec.operator_policy import RunPolicy
from trainer.spec.resources import gpus_held, gpus_per_node

VERL = dict(engine="verl", task="math", preset=None, model_path="/models/q", train_data="/data/t.jsonl",
            shuffle_mini_batches=False)


def issues(data: dict, policy: RunPolicy | None = None) -> dict[str, str]:
    try:
        parse_run_config(data, policy)
    except ConfigError as e:
        return dict(e.issues)
    return {}


@pytest.mark.parametrize("data,cuda,want", [
    ({}, False, 0),  # an embedded CPU run holds no GPU
    ({}, True, 1),  # device=auto on a CUDA worker: one
    ({"device": "cuda"}, False, 1),
    ({"device": "cpu"}, True, 0),
    ({"resources": {"gpus_per_node": 1}, "device": "cpu"}, False, 1),  # a logical GPU: placed, no device behind it
    (VERL, False, 1),  # verl: one rank, a logical GPU on the CPU
    ({**VERL, "resources": {"gpus_per_node": 4, "nodes": 2}}, True, 4),
])
def test_gpus_per_node_defaults_are_todays_behaviour(data, cuda, want):
    cfg = parse_run_config(data, RunPolicy(max_nodes=2))
    assert gpus_per_node(cfg, cuda) == want
    assert gpus_held(cfg, cuda) == want * cfg.resources.nodes


@pytest.mark.parametrize("data,field,words", [
    ({"resources": {"gpus_per_node": 2}}, "resources.gpus_per_node", "Use engine=verl"),
    ({"resources": {"nodes": 2}}, "resources.nodes", "use engine=verl"),
    ({"resources": {"rollout_tp": 2}}, "resources.rollout_tp", "verl"),
    ({"device": "cuda", "resources": {"gpus_per_node": 0}}, "resources.gpus_per_node", "holds its GPU"),
    ({**VERL, "resources": {"gpus_per_node": 0}}, "resources.gpus_per_node", "at least 1"),
    ({**VERL, "resources": {"gpus_per_node": 4, "rollout_tp": 2}}, "resources.rollout_tp", "sampler=vllm"),
    ({**VERL, "rollout": {"sampler": "vllm"}, "device": "cuda", "resources": {"gpus_per_node": 4, "rollout_tp": 3}},
     "resources.rollout_tp", "must divide gpus_per_node (4)"),
    ({"resources": {"gpus_per_node": -1}}, "resources.gpus_per_node", "greater than or equal to 0"),
    ({"resources": {"gpus": 2}}, "resources.gpus", "Extra inputs"),
])
def test_submit_rules_name_the_field_and_say_what_to_do(data, field, words):
    got = issues(data)
    assert field in got and words in got[field], got


def test_a_valid_multi_gpu_verl_config_passes():
    ok = {**VERL, "rollout": {"sampler": "vllm"}, "device": "cuda", "resources": {"gpus_per_node": 8, "nodes": 2, "rollout_tp": 2}}
    assert issues(ok, RunPolicy(max_gpus=16, max_nodes=2)) == {}


def test_operator_caps_gpus_and_nodes():
    data = {**VERL, "resources": {"gpus_per_node": 8, "nodes": 2}}
    got = issues(data, RunPolicy())  # defaults: 8 GPUs, 1 node
    assert "AERO_MAX_NODES" in got["resources.nodes"]
    assert "16 GPUs" in got["resources.gpus_per_node"] and "AERO_MAX_GPUS" in got["resources.gpus_per_node"]
    assert issues(data, RunPolicy(max_gpus=16, max_nodes=2)) == {}
    assert issues({"resources": {"gpus_per_node": 1}}, RunPolicy(max_gpus=0))  # a logical GPU counts too


def test_policy_reads_the_caps_from_the_environment():
    p = RunPolicy.from_env({"AERO_MAX_GPUS": "64", "AERO_MAX_NODES": "8"})
    assert (p.max_gpus, p.max_nodes) == (64, 8)
