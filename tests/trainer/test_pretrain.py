"""The shipped tiny preset and the warm start that produces it."""

import torch

from trainer.model import load_policy
from trainer.presets import PRESETS
from trainer.pretrain import measure_strata, pretrain, sft_batch
from trainer.tasks.arithmetic import ArithmeticTask
from trainer.tasks.tokenizer import CharTokenizer


def test_shipped_checkpoint_covers_every_stratum():
    """Issue target: at RL step 0, 8 samples at T=1.0, the training prompts fall in all strata:
    >= 25% all-fail, >= 15% partial, >= 10% all-correct."""
    path = PRESETS["tiny"]
    task = ArithmeticTask(tokenizer=CharTokenizer.load(path))
    strata = measure_strata(load_policy(path).eval(), task, n=8, temperature=1.0, count=256, seed=0)
    assert strata["all_fail"] >= 0.25, strata
    assert strata["partial"] >= 0.15, strata
    assert strata["all_correct"] >= 0.10, strata


def test_sft_batch_masks_prompt_tokens():
    b = sft_batch([([1, 5, 6], [7, 2]), ([1, 5], [7, 8, 2])], pad_id=0)
    assert b["input_ids"].tolist() == [[1, 5, 6, 7, 2], [1, 5, 7, 8, 2]]
    assert b["labels"].tolist() == [[-100, -100, -100, 7, 2], [-100, -100, 7, 8, 2]]
    assert b["attention_mask"].tolist() == [[1] * 5, [1] * 5]


def test_pretrain_saves_a_loadable_policy(tmp_path):
    report = pretrain(tmp_path, steps=3, batch=16, seed=1)
    assert set(report) >= {"final_loss", "all_fail", "partial", "all_correct"}
    model = load_policy(tmp_path)
    assert CharTokenizer.load(tmp_path).vocab_size == model.config.vocab_size
    assert torch.isfinite(torch.tensor(report["final_loss"]))
