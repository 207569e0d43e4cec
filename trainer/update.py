"""The policy update shared by every method: clipped surrogate on variable-size groups,
entropy bonus, optional k3 KL to a frozen reference, AdamW with warmup and grad clipping."""

from __future__ import annotations

import math

import torch

from trainer.core.losses import aggregate, clipped_surrogate, kl_k3
from trainer.rollout.base import Rollout
from trainer.rollout.batching import collate, sequence_logprobs


def warmup_constant_lr(step: int, warmup: int) -> float:
    """LR multiplier: linear warmup over ``warmup`` optimizer steps, then constant (paper Table 9)."""
    return min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0


def warmup_length(total_steps: int, warmup_ratio: float, warmup_steps: int | None = None, per_step: int = 1) -> int:
    """Warmup in optimizer steps: ``warmup_steps`` training steps (``per_step`` optimizer steps
    each) when given, else ceil(warmup_ratio * total optimizer steps) (the paper's rule)."""
    return warmup_steps * per_step if warmup_steps is not None else math.ceil(warmup_ratio * total_steps)


def policy_update(model, optimizer, scheduler, rollouts: list[Rollout], advantages: torch.Tensor, *, pad_id: int,
                  temperature: float, eps_low: float, eps_high: float, loss_agg: str, entropy_coef: float,
                  kl_coef: float, ref_model=None, grad_clip: float, epochs: int = 1, mini_batches: int = 1,
                  device="cpu") -> dict[str, float]:
    """One step's update. The PPO ratio uses the engine's sampling log-probs as the behaviour
    policy (no extra forward); with 1 epoch and 1 mini-batch the ratio is 1 up to numerics.
    Returns mean stats over the optimizer steps."""
    model.train()
    stats: dict[str, list[float]] = {k: [] for k in ("loss/policy", "loss/total", "train/entropy", "train/kl",
                                                    "train/clip_frac", "train/approx_kl", "train/grad_norm")}
    order = torch.arange(len(rollouts))
    for _ in range(epochs):
        for idx in order.chunk(mini_batches):
            mb = collate([rollouts[i] for i in idx.tolist()], pad_id, device)
            adv = advantages[idx].to(device)
            logp, entropy = sequence_logprobs(model, mb, temperature)
            pg_loss, pg_stats = clipped_surrogate(logp, mb.old_logprobs, adv, mb.response_mask, eps_low, eps_high, loss_agg)
            ent = aggregate(entropy, mb.response_mask, loss_agg)
            loss = pg_loss - entropy_coef * ent
            kl = torch.zeros(())
            if ref_model is not None and kl_coef > 0:
                with torch.no_grad():
                    ref_logp, _ = sequence_logprobs(ref_model, mb, temperature)
                kl = aggregate(kl_k3(logp, ref_logp), mb.response_mask, loss_agg)
                loss = loss + kl_coef * kl
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            scheduler.step()
            for key, val in (("loss/policy", pg_loss), ("loss/total", loss), ("train/entropy", ent), ("train/kl", kl),
                             ("train/clip_frac", pg_stats["clip_frac"]), ("train/approx_kl", pg_stats["approx_kl"]),
                             ("train/grad_norm", grad_norm)):
                stats[key].append(float(val.detach()) if torch.is_tensor(val) else float(val))
    return {k: sum(v) / len(v) for k, v in stats.items()}
