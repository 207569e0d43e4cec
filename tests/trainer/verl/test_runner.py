"""run_verl's launcher side, everything before Ray starts: platform checks, data + overrides +
hydra compose + verl's validate_config, and the model shape for FLOPs (meta device, no weights)."""

import json

import pytest

from trainer.spec.config import ConfigError, parse_run_config
from trainer.verl.runner import check_verl_config, model_shape


@pytest.fixture
def model_dir(tmp_path):
    from transformers import Qwen2Config

    d = tmp_path / "model"
    Qwen2Config(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, tie_word_embeddings=True).save_pretrained(d)
    return d


def cfg_for(model_dir, tmp_path, **kw):
    train = tmp_path / "train.jsonl"
    train.write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n")
    bench = tmp_path / "math500.jsonl"
    bench.write_text(json.dumps({"problem": "2+2?", "answer": "4"}) + "\n")
    return parse_run_config({"preset": None, "model_path": str(model_dir), "task": "math", "engine": "verl",
                             "train_data": str(train), "benchmarks": {"MATH-500": str(bench)}, "method": "aero",
                             "batch_prompts": 4, **kw})


def test_model_shape_counts_parameters_without_loading_weights(model_dir):
    from transformers import AutoModelForCausalLM, Qwen2Config

    real = AutoModelForCausalLM.from_config(Qwen2Config.from_pretrained(model_dir))
    assert model_shape(model_dir) == (sum(p.numel() for p in real.parameters()), 2, 32)


def test_worker_check_names_model_path(model_dir, tmp_path):
    with pytest.raises(ConfigError) as err:
        check_verl_config(cfg_for(tmp_path / "missing", tmp_path))
    assert "model_path" in dict(err.value.issues)
    check_verl_config(cfg_for(model_dir, tmp_path))


def test_verl_rules_are_refused_at_parse(model_dir, tmp_path):
    """The verl-only rules live in parse_run_config, so they never reach the worker."""
    with pytest.raises(ConfigError) as err:
        cfg_for(model_dir, tmp_path, mini_batches=3, shuffle_mini_batches=False)
    assert "mini_batches" in dict(err.value.issues)


def test_build_verl_config_writes_data_and_validates(model_dir, tmp_path):
    pytest.importorskip("verl")
    from trainer.verl.runner import build_verl_config

    out = tmp_path / "run"
    config = build_verl_config(cfg_for(model_dir, tmp_path, resources={"gpus_per_node": 2}), out)
    assert (out / "verl_data" / "train.parquet").is_file() and (out / "verl_data" / "val_0.parquet").is_file()
    assert list(config.data.val_files) == [str(out / "verl_data" / "val_0.parquet")]
    assert config.actor_rollout_ref.model.path == str(model_dir)
    assert config.trainer.n_gpus_per_node == 2 and config.actor_rollout_ref.rollout.n == 8
