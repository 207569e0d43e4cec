"""examples/grpo_step.py stays what it promises: one GRPO step built from the engine's own
functions, whose loss is the engine's loss on the same batch, short enough to read at once, and
runnable as a script."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import common.metric_keys as mk
from trainer.embedded.loop import initial_state, step_context, train_step
from trainer.embedded.presets import load_setup

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "grpo_step.py"
MAX_LINES = 150
# Float tolerance of the comparison: 1e-5 relative or 1e-6 absolute, whichever is larger. The
# example's forward is one right-padded pass (sequence_logprobs); the engine runs each distinct
# prompt once and continues its rows from the prompt's KV cache
# (trainer/embedded/update.py::shared_prompt_logprobs). Same maths, other matmul shapes, so only
# the float32 summation order differs: measured 6e-8 apart on the losses, 1.2e-6 (3e-7
# relative) on the gradient norm.
REL_TOL, ABS_TOL = 1e-5, 1e-6


def load_example():
    spec = importlib.util.spec_from_file_location("grpo_step_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example():
    return load_example()


def test_the_example_is_under_150_lines():
    assert len(EXAMPLE.read_text().splitlines()) < MAX_LINES


def test_the_example_step_is_the_engines_grpo_step(example):
    cfg = example.config()
    # The example: its own sampling generator seeded as the run's, its own optimizer.
    setup = load_setup(cfg)
    batch = example.sample_batch(setup, cfg, torch.Generator(device=setup.device).manual_seed(cfg.seed))
    ours = example.grpo_step(setup.model, example.make_optimizer(setup.model, cfg), batch, cfg)
    # The engine: a fresh copy of the same policy, step 0 of the loop for method grpo.
    eng = load_setup(cfg)
    state = initial_state(cfg, eng)
    theirs = train_step(cfg, eng, step_context(cfg, eng, state), state)

    assert 0 < ours[mk.ADV_ZERO_FRAC] < 1  # mixed groups and flat ones: a policy gradient to compare
    assert theirs[mk.ROLLOUTS_GENERATED] == theirs[mk.ROLLOUTS_TRAINED] == len(batch.rewards)
    assert ours[mk.REWARD_MEAN] == pytest.approx(theirs[mk.REWARD_MEAN], rel=1e-6)  # same tokens, same verifier
    assert ours[mk.ADV_ZERO_FRAC] == theirs[mk.ADV_ZERO_FRAC]  # same groups
    # At ratio 1 the clipped term averages the group-centred advantages, so the policy loss is
    # ~0 and the total is mostly the entropy bonus; the gradient norm is what checks the policy
    # gradient itself.
    for key in (mk.ADV_ABS_MEAN, "loss/total", "loss/policy", mk.TRAIN_GRAD_NORM):
        assert ours[key] == pytest.approx(theirs[key], rel=REL_TOL, abs=ABS_TOL), key
    assert ours["loss/total"] != 0.0 and ours["train/grad_norm"] > 0.0


@pytest.mark.slow  # a fresh interpreter loads torch and the preset
def test_the_example_runs_as_a_script():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(EXAMPLE)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "reward" in out.stdout and "loss" in out.stdout
