"""The shipped tiny preset and the warm start that produces it."""

import json

import numpy as np
import pytest
import torch

from trainer.embedded.model import load_policy
from trainer.embedded.presets import PRESETS
from trainer.embedded.pretrain import corrupt_answers, measure_strata, pretrain, sft_batch
from trainer.tasks import make_task
from trainer.tasks.registry import PRESET_TASK
from trainer.tasks.tokenizer import CharTokenizer


@pytest.mark.parametrize("preset", sorted(PRESETS))  # the shipped ones
def test_shipped_checkpoint_has_rl_headroom(preset):
    """The base RL starts from: every AERO stratum is populated at 8 samples, T=1.0, and it
    samples worse than it knows (T=1 accuracy well below greedy), so RL has something to do.
    The recipe that built it is recorded beside it."""
    path = PRESETS[preset]
    task = make_task(PRESET_TASK[preset], tokenizer=CharTokenizer.load(path))
    strata = measure_strata(load_policy(path).eval(), task, n=8, temperature=1.0, count=256, seed=0)
    assert strata["all_fail"] >= 0.25, strata
    assert strata["partial"] >= 0.30, strata
    assert strata["all_correct"] > 0.0, strata
    recorded = json.loads((path / "pretrain.json").read_text())
    assert recorded["command"].startswith(f"aero pretrain --out trainer/assets/{preset}")
    overall = recorded["base"]["levels"]["overall"]
    assert overall["greedy"] - overall["avg_at_k"] >= 0.1, overall


def test_label_noise_changes_one_digit_of_the_chosen_answers():
    tok = CharTokenizer()
    digits = [tok.encode(str(d))[0] for d in range(10)]
    answers = [(list(range(3)), tok.encode("1234") + [tok.eos_id]) for _ in range(400)]
    noisy = corrupt_answers(answers, digits, 0.3, np.random.default_rng(0))
    changed = [sum(a != b for a, b in zip(x[1], y[1])) for x, y in zip(answers, noisy)]
    assert set(changed) <= {0, 1}
    assert 0.25 < np.mean(changed) < 0.35
    assert all(n[1][-1] == tok.eos_id for n in noisy)  # EOS is never corrupted
    assert corrupt_answers(answers, digits, 0.0, np.random.default_rng(0)) == answers


def test_sft_batch_masks_prompt_tokens():
    b = sft_batch([([1, 5, 6], [7, 2]), ([1, 5], [7, 8, 2])], pad_id=0)
    assert b["input_ids"].tolist() == [[1, 5, 6, 7, 2], [1, 5, 7, 8, 2]]
    assert b["labels"].tolist() == [[-100, -100, -100, 7, 2], [-100, -100, 7, 8, 2]]
    assert b["attention_mask"].tolist() == [[1] * 5, [1] * 5]


@pytest.mark.parametrize("task", ["arithmetic", "countdown"])
def test_pretrain_saves_a_loadable_policy(tmp_path, task):
    report = pretrain(tmp_path, task, steps=3, batch=16, seed=1, noisy_steps=2, describe={"problems": 4, "strata_prompts": 16})
    assert set(report) >= {"final_loss", "noisy_final_loss", "strata", "levels"}
    assert set(report["levels"]["overall"]) == {"avg_at_k", "pass_at_k", "greedy", "zero_at_8", "zero_at_16", "zero_at_32"}
    assert json.loads((tmp_path / "pretrain.json").read_text())["recipe"]["noisy_steps"] == 2
    model = load_policy(tmp_path)
    assert CharTokenizer.load(tmp_path).vocab_size == model.config.vocab_size
    assert CharTokenizer.load(tmp_path).chars == make_task(task).tokenizer.chars
    assert torch.isfinite(torch.tensor(report["final_loss"]))
    assert report["problems"] == 4 and report["n"] == 32
