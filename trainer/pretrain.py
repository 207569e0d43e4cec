"""Supervised warm start of the embedded tiny policy (the `tiny` preset's base checkpoint).

RL needs a policy that already solves some problems: a random policy gives all-fail groups
only. The warm start trains next-token prediction on answers (prompt tokens masked) with a mix
that under-represents the hardest levels (DESIGN.md §6), so that at RL step 0, with 8 samples
at temperature 1.0, the training prompts fall in every AERO stratum.

Reproduce the shipped checkpoint with:  aero pretrain --out trainer/assets/tiny
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from trainer.model import build_model, tiny_qwen2_config
from trainer.rollout.base import SamplingParams
from trainer.tasks.arithmetic import WARM_START_WEIGHTS, ArithmeticTask


def sft_batch(examples: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded input ids with labels only on answer tokens (-100 elsewhere)."""
    T = max(len(p) + len(a) for p, a in examples)
    ids = torch.full((len(examples), T), pad_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    mask = torch.zeros_like(ids)
    for i, (p, a) in enumerate(examples):
        seq = p + a
        ids[i, : len(seq)] = torch.tensor(seq)
        labels[i, len(p): len(seq)] = torch.tensor(a)
        mask[i, : len(seq)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def cosine_lr(step: int, total: int, warmup: int = 20, floor: float = 0.1) -> float:
    if step < warmup:
        return (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t))


def measure_strata(model, task: ArithmeticTask, n: int = 8, temperature: float = 1.0, count: int = 256,
                   seed: int = 0, max_new_tokens: int = 12) -> dict[str, float]:
    """Fractions of RL training prompts that are all-fail / partial / all-correct at n samples."""
    from trainer.rollout.embedded import EmbeddedEngine

    problems = task.train_problems(0, count, seed)
    engine = EmbeddedEngine(model, eos_id=task.tokenizer.eos_id, pad_id=task.tokenizer.pad_id)
    rollouts = engine.generate([task.encode_prompt(p) for p in problems], n,
                               SamplingParams(temperature, 1.0, max_new_tokens), torch.Generator().manual_seed(seed))
    correct = np.zeros(count, dtype=int)
    for r in rollouts:
        correct[r.prompt_index] += int(task.score(task.tokenizer.decode(r.response_ids), problems[r.prompt_index]) > 0)
    return {"all_fail": float((correct == 0).mean()), "partial": float(((correct > 0) & (correct < n)).mean()),
            "all_correct": float((correct == n).mean()), "mean_accuracy": float(correct.mean() / n)}


def pretrain(out_dir: str | Path, steps: int = 900, batch: int = 256, lr: float = 2e-3, seed: int = 0,
             level_weights: dict[str, float] | None = None,
             progress: Callable[[int, float], None] | None = None) -> dict[str, float]:
    """Train the tiny policy from scratch and save it (HF format + tokenizer) to ``out_dir``."""
    torch.manual_seed(seed)
    task = ArithmeticTask()
    tok = task.tokenizer
    model = build_model(tiny_qwen2_config(tok.vocab_size, tok.bos_id, tok.eos_id, tok.pad_id), seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: cosine_lr(s, steps))
    weights = level_weights or WARM_START_WEIGHTS
    model.train()
    loss_val = float("nan")
    for step in range(steps):
        batch_t = sft_batch(task.sft_examples(batch, seed, weights, start=step * batch), tok.pad_id)
        loss = model(**batch_t).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_val = loss.item()
        if progress is not None:
            progress(step + 1, loss_val)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save(out)
    strata = measure_strata(model.eval(), task)
    return {"final_loss": loss_val, **strata}
