"""Supervised warm start of an embedded tiny policy on a generated task (the base checkpoint of
its preset: `tiny` for arithmetic, `tiny-countdown` for countdown).

RL needs a policy that already solves some problems: a random policy gives all-fail groups
only. The warm start has two phases:

1. Clean phase: next-token prediction on answers (prompt tokens masked) with a mix that
   under-represents the hardest levels, so that at RL step 0, with 8 samples at temperature
   1.0, the training prompts fall in every AERO stratum.
2. Noisy-label phase: more supervised steps in which a fraction ``label_noise`` of the targets
   carry one wrong digit. The policy keeps its greedy answers (the majority label) but
   puts real probability on wrong digits: it samples worse than it knows, like a pretrained
   LM whose sampling distribution leaks mass onto wrong answers. That is the headroom RL with
   verifiable rewards is known to use (sharpening towards answers the model can already
   produce); a clean base is either already sharp (easy levels) or has ~0 Pass@k (hard
   levels), and RL moves it by no more than evaluation noise.

Reproduce a shipped checkpoint with the command in its ``pretrain.json`` (e.g.
``aero pretrain --out trainer/assets/tiny``); the recipe, the command and the base's measured strata are written to ``pretrain.json``
are written there beside the checkpoint.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from trainer.spec.config import RunConfig
from trainer.embedded.model import build_model, tiny_qwen2_config
from trainer.rollout.base import SamplingParams
from trainer.tasks.generated import GeneratedTask


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


def measure_strata(model, task: GeneratedTask, n: int = 8, temperature: float = 1.0, count: int = 256,
                   seed: int = 0, max_new_tokens: int = 12) -> dict[str, float]:
    """Fractions of RL training prompts that are all-fail / partial / all-correct at n samples."""
    from trainer.rollout.embedded import HFSampler

    problems = task.train_problems(0, count, seed)
    engine = HFSampler(model, eos_id=task.tokenizer.eos_id, pad_id=task.tokenizer.pad_id)
    rollouts = engine.generate([task.encode_prompt(p) for p in problems], n,
                               SamplingParams(temperature, 1.0, max_new_tokens), torch.Generator().manual_seed(seed))
    correct = np.zeros(count, dtype=int)
    for r in rollouts:
        correct[r.prompt_index] += int(task.score(task.tokenizer.decode(r.response_ids), problems[r.prompt_index]) > 0)
    return {"all_fail": float((correct == 0).mean()), "partial": float(((correct > 0) & (correct < n)).mean()),
            "all_correct": float((correct == n).mean()), "mean_accuracy": float(correct.mean() / n)}


def corrupt_answers(examples: list[tuple[list[int], list[int]]], digit_ids: list[int], rate: float,
                    rng: np.random.Generator) -> list[tuple[list[int], list[int]]]:
    """With probability ``rate`` per example, replace one answer digit (uniform position, EOS
    excluded) with a different digit (uniform over the other nine): a wrong label."""
    out = []
    for prompt, answer in examples:
        answer = list(answer)
        positions = [i for i, t in enumerate(answer) if t in digit_ids]
        if positions and rng.random() < rate:
            i = positions[rng.integers(len(positions))]
            answer[i] = int(rng.choice([d for d in digit_ids if d != answer[i]]))
        out.append((prompt, answer))
    return out


def sft_phase(model, task: GeneratedTask, steps: int, batch: int, lr: float, seed: int, weights: dict[str, float],
              start: int = 0, label_noise: float = 0.0,
              progress: Callable[[int, float], None] | None = None) -> float:
    """``steps`` AdamW steps (cosine schedule with warmup, fresh optimizer) on SFT stream
    examples ``start*batch ..``; returns the last loss. ``progress(step, loss)`` with the
    phase's step counted from ``start``."""
    tok = task.tokenizer
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: cosine_lr(s, steps))
    digits = [tok.encode(str(d))[0] for d in range(10)]
    rng = np.random.default_rng([seed, start])
    model.train()
    loss_val = float("nan")
    for step in range(steps):
        examples = task.sft_examples(batch, seed, weights, start=(start + step) * batch)
        if label_noise > 0:
            examples = corrupt_answers(examples, digits, label_noise, rng)
        loss = model(**sft_batch(examples, tok.pad_id)).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_val = loss.item()
        if progress is not None:
            progress(start + step + 1, loss_val)
    return loss_val


def describe_base(model, task: GeneratedTask, k: int = 8, n: int = 32, problems: int = 64, seed: int = 0,
                  strata_prompts: int = 256) -> dict[str, Any]:
    """What BENCHMARKS.md reports for a base, per held-out level: Avg@k and Pass@k at T=1 (from
    n >= k samples, unbiased), greedy accuracy (the answer the policy 'knows'), and the share of
    problems with no correct answer in 8, 16 and 32 samples: after AERO's exploration, under
    GRPO's budget, and at AERO's rescue cap n_max. The last is the floor of AERO's zero-accuracy
    after rescue: a prompt that fails 32 times cannot be rescued. Plus the RL strata at step 0."""
    from trainer.core.passk import pass_at_k
    from trainer.tasks.evaluate import evaluate
    from trainer.rollout.embedded import HFSampler

    engine = HFSampler(model, eos_id=task.tokenizer.eos_id, pad_id=task.tokenizer.pad_id)
    sampled = evaluate(engine, task, SamplingParams(1.0, 1.0, 12), n, problems, seed=seed, timeout_s=5.0)
    greedy = evaluate(engine, task, SamplingParams(0.0, 1.0, 12), 1, problems, seed=seed, timeout_s=5.0)
    levels = {}
    for name, r in sampled.items():
        nn, cc = np.array(r["per_problem"]).T
        levels[name] = {"avg_at_k": r["avg_at_k"], "pass_at_k": float(pass_at_k(nn, cc, k)), "greedy": greedy[name]["avg_at_k"],
                        **{f"zero_at_{m}": float(1 - pass_at_k(nn, cc, m)) for m in (8, 16, 32) if m <= n}}
    return {"k": k, "n": n, "problems": problems, "levels": levels, "strata": measure_strata(model, task, n=k, count=strata_prompts, seed=seed)}


def pretrain(out_dir: str | Path, task_name: str = "arithmetic", steps: int = 900, batch: int = 256, lr: float = 2e-3, seed: int = 0,
             level_weights: dict[str, float] | None = None, noisy_steps: int = 150, noisy_lr: float = 1e-3,
             label_noise: float = 0.3, progress: Callable[[int, float], None] | None = None,
             describe: dict[str, int] | None = None) -> dict[str, Any]:
    """Train the tiny policy from scratch (clean phase, then the noisy-label phase) and save it
    (HF format + tokenizer + ``pretrain.json``: recipe, command, measured base) to ``out_dir``.
    ``describe``: sizes of the base's measurement (``describe_base``'s ``problems``, ``n``,
    ``strata_prompts``; its defaults when None)."""
    if not 0.0 <= label_noise <= 1.0:
        raise ValueError(f"label_noise must be in [0, 1]; got {label_noise}")
    from trainer.tasks import make_task

    torch.manual_seed(seed)
    task = make_task(task_name)
    if not isinstance(task, GeneratedTask):
        raise ValueError(f"task {task_name!r}: a warm start needs a generated task (its SFT stream and char tokenizer)")
    tok = task.tokenizer
    model = build_model(tiny_qwen2_config(tok.vocab_size, tok.bos_id, tok.eos_id, tok.pad_id), seed)
    weights = level_weights or task.WARM_START
    clean_loss = sft_phase(model, task, steps, batch, lr, seed, weights, progress=progress)
    noisy_loss = (sft_phase(model, task, noisy_steps, batch, noisy_lr, seed, weights, start=steps,
                            label_noise=label_noise, progress=progress) if noisy_steps > 0 else float("nan"))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save(out)
    default_task = RunConfig.model_fields["task"].default  # the recipe names any other task
    recipe = {**({"task": task_name} if task_name != default_task else {}), "steps": steps, "batch": batch, "lr": lr, "seed": seed, "level_weights": weights,
              "noisy_steps": noisy_steps, "noisy_lr": noisy_lr, "label_noise": label_noise}
    report = {"final_loss": clean_loss, "noisy_final_loss": noisy_loss, **describe_base(model.eval(), task, **(describe or {}))}
    (out / "pretrain.json").write_text(json.dumps(
        {"command": pretrain_command(out, recipe), "recipe": recipe, "torch": torch.__version__, "base": report},
        indent=2) + "\n")
    return report


def pretrain_command(out: Path, recipe: dict[str, Any]) -> str:
    """The `aero pretrain` command line that reproduces ``recipe`` (level weights are not a flag:
    the default mix is the only one the CLI builds)."""
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in recipe.items() if k != "level_weights")
    return f"aero pretrain --out {out} {flags}"
