"""The shipped model shapes: the real Qwen2.5 architectures from the repository's config files,
counted on the meta device (no memory), and the CPU shape built with seeded random weights."""

from __future__ import annotations

from typing import get_args

import pytest
import torch

from trainer.spec.config import ModelShape, parse_run_config
from trainer.embedded.presets import load_setup
from trainer.embedded.shapes import SHAPES, SHAPES_DIR, build_shape_model, shape_config, shape_parameters

# name: (parameters, hidden, intermediate, layers, heads, kv heads, vocab, tied)
EXPECTED = {
    "qwen2.5-0.5b": (494_032_768, 896, 4864, 24, 14, 2, 151_936, True),  # Qwen2.5-0.5B: 0.49B
    "qwen2.5-1.5b": (1_543_714_304, 1536, 8960, 28, 12, 2, 151_936, True),  # Qwen2.5-Math-1.5B: 1.54B
    "qwen2.5-7b": (7_615_616_512, 3584, 18944, 28, 28, 4, 152_064, False),  # Qwen2.5(-Math)-7B: 7.62B
    "tiny-151k": (9_847_360, 64, 256, 2, 4, 2, 151_936, True),
}


def test_every_shape_ships_a_config_and_the_config_field_names_them_all():
    assert set(get_args(ModelShape)) == set(SHAPES) == set(EXPECTED)
    assert {p.name for p in SHAPES_DIR.iterdir() if (p / "config.json").is_file()} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shape_has_the_real_architecture_and_parameter_count(name):
    n, hidden, inter, layers, heads, kv, vocab, tied = EXPECTED[name]
    c = shape_config(name)
    assert (c.model_type, c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
            c.num_key_value_heads, c.vocab_size, c.tie_word_embeddings) == ("qwen2", hidden, inter, layers, heads, kv,
                                                                             vocab, tied)
    assert c.max_position_embeddings >= 1024 + 1536  # the paper's prompt + response
    assert shape_parameters(name) == n


def test_rope_and_context_are_the_public_models():
    assert shape_config("qwen2.5-1.5b").rope_parameters["rope_theta"] == 10_000.0  # Qwen2.5-Math-1.5B
    assert shape_config("qwen2.5-1.5b").max_position_embeddings == 4096
    assert shape_config("qwen2.5-0.5b").rope_parameters["rope_theta"] == 1_000_000.0


def test_random_weights_are_seeded_and_leave_the_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_shape_model("tiny-151k", seed=0)
    assert torch.equal(torch.rand(1), before)  # the build forked the RNG
    b, c = build_shape_model("tiny-151k", seed=0), build_shape_model("tiny-151k", seed=1)
    wa, wb, wc = (m.model.layers[0].mlp.up_proj.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    assert wa.dtype == torch.float32 and wa.std().item() == pytest.approx(0.02, rel=0.05)  # initializer_range
    assert build_shape_model("tiny-151k", dtype=torch.bfloat16).dtype == torch.bfloat16


def test_a_shape_config_builds_a_setup_with_the_strata_task():
    cfg = parse_run_config({"preset": None, "model_shape": "tiny-151k", "task": "strata", "device": "cpu"})
    setup = load_setup(cfg)
    assert setup.n_params == EXPECTED["tiny-151k"][0] and setup.task.name == "strata"
    assert setup.task.tokenizer.vocab_size == 151_936
    assert setup.sampler.stop_ids.tolist() == list(setup.task.stop_ids)
