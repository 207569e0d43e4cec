"""The policy update shared by every method: clipped surrogate on variable-size groups,
entropy bonus, optional k3 KL to a frozen reference, AdamW with warmup and grad clipping."""

from __future__ import annotations

import math

import torch

from dataclasses import replace

from trainer.core.losses import Aggregation, clipped_surrogate, kl_k3
from trainer.embedded.model import is_gradient_checkpointing
from trainer.rollout.base import Rollout
from trainer.rollout.batching import TrainBatch, collate, sequence_logprobs, token_logprobs_and_entropy
from trainer.rollout.embedded import _forward_kwargs, _output_cache, left_pad


def warmup_constant_lr(step: int, warmup: int) -> float:
    """LR multiplier: linear warmup over ``warmup`` optimizer steps, then constant (paper Table 9)."""
    return min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0


def warmup_length(total_steps: int, warmup_ratio: float, warmup_steps: int | None = None, per_step: int = 1) -> int:
    """Warmup in optimizer steps: ``warmup_steps`` training steps (``per_step`` optimizer steps
    each) when given, else ceil(warmup_ratio * total optimizer steps) (the paper's rule)."""
    return warmup_steps * per_step if warmup_steps is not None else math.ceil(warmup_ratio * total_steps)


def shares_prompts(model, rollouts: list[Rollout], batch: TrainBatch) -> bool:
    """Whether :func:`shared_prompt_logprobs` does fewer token forwards than one pass over the
    right-padded batch: distinct prompts x their width + rows x (longest response - 1) against
    rows x T. Not with activation checkpointing (HF turns the KV cache off under it)."""
    hf_model = hasattr(getattr(model, "config", None), "num_hidden_layers")
    if not rollouts or not hf_model or is_gradient_checkpointing(model):
        return False
    prompts = {tuple(r.prompt_ids) for r in rollouts}
    longest_resp = int(batch.response_lengths.max())
    shared = len(prompts) * max(len(p) for p in prompts) + len(rollouts) * max(longest_resp - 1, 0)
    return longest_resp > 0 and shared < batch.input_ids.numel()


def shared_prompt_logprobs(model, rollouts: list[Rollout], batch: TrainBatch, temperature: float, pad_id: int,
                           with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``sequence_logprobs`` computed once per distinct prompt instead of once per row.

    GRPO and AERO train n rollouts of each prompt, and a right-padded forward recomputes the
    prompt's activations n times; on the arithmetic task prompts are ~2/3 of every sequence.
    Here each distinct prompt runs once (left-padded, KV cache on, logits of its last position
    only), the cache is copied to its rows (``reorder_cache``: an index_select, whose backward
    sums the rows' gradients back into the prompt pass), and one pass over the responses
    (right-padded, fed all but their last token) continues from it, the same layout as the
    engine's prefill + decode. Same outputs as ``sequence_logprobs`` ([N, T], zero off the
    response) up to float rounding: only the matmul shapes, hence summation order, differ."""
    dev = batch.input_ids.device
    slot: dict[tuple[int, ...], int] = {}
    rows = torch.tensor([slot.setdefault(tuple(r.prompt_ids), len(slot)) for r in rollouts], dtype=torch.long,
                        device=dev)
    ids, mask, pos = left_pad([list(p) for p in slot], pad_id, dev)
    cache_kw, keep_kw = _forward_kwargs(model)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                **({keep_kw: 1} if keep_kw else {}))
    logits = out.logits[:, -1:][rows]  # [N, 1, V]: predicts each row's first response token
    p_len, q_len = batch.prompt_lengths, batch.response_lengths
    width = int(q_len.max())
    j = torch.arange(width, device=dev)
    in_resp = j[None, :] < q_len[:, None]  # [N, width]
    resp = batch.input_ids.gather(1, (p_len[:, None] + j).clamp(max=batch.input_ids.shape[1] - 1))
    resp = resp.masked_fill(~in_resp, pad_id)
    if width > 1:
        cache = _output_cache(out)
        cache.reorder_cache(rows)
        more = model(input_ids=resp[:, :-1], attention_mask=torch.cat([mask[rows], in_resp[:, :-1].long()], 1),
                     position_ids=pos[rows][:, -1:] + 1 + j[:-1], use_cache=True, **{cache_kw: cache}).logits
        logits = torch.cat([logits, more], 1)
    logp, ent = token_logprobs_and_entropy(logits, resp, temperature, with_entropy)
    return _place(logp, in_resp, p_len, batch.input_ids.shape[1]), \
        (_place(ent, in_resp, p_len, batch.input_ids.shape[1]) if with_entropy else None)


def _place(values: torch.Tensor, keep: torch.Tensor, p_len: torch.Tensor, T: int) -> torch.Tensor:
    """Response-aligned [N, width] -> the batch's layout [N, T]: value j of row i goes to
    column p_len[i] + j; zero elsewhere (differentiable)."""
    N, width = values.shape
    idx = p_len[:, None] + torch.arange(width, device=values.device)
    out = torch.zeros((N, T + width), dtype=values.dtype, device=values.device)
    return out.scatter(1, idx, values * keep.to(values.dtype))[:, :T]


def policy_logprobs(model, rollouts: list[Rollout], batch: TrainBatch, temperature: float, pad_id: int,
                    with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The update's forward: per distinct prompt when that is cheaper, else one padded pass."""
    if shares_prompts(model, rollouts, batch):
        return shared_prompt_logprobs(model, rollouts, batch, temperature, pad_id, with_entropy)
    return sequence_logprobs(model, batch, temperature, with_entropy)


def policy_update(model, optimizer, scheduler, rollouts: list[Rollout], advantages: torch.Tensor, *, pad_id: int,
                  temperature: float, eps_low: float, eps_high: float, agg: Aggregation, entropy_coef: float,
                  kl_coef: float, ref_model=None, grad_clip: float, epochs: int = 1, mini_batches: int = 1,
                  device="cpu") -> dict[str, float]:
    """One step's update. The PPO ratio uses the engine's sampling log-probs as the behaviour
    policy (no extra forward); with 1 epoch and 1 mini-batch the ratio is 1 up to numerics.
    The forward runs once per distinct prompt where rows share prompts (``policy_logprobs``).
    Mini-batches split the rows in order as ``torch.tensor_split`` does (never more than there
    are rows), and the sequence means divide by rows / mini-batches in each (``agg.n_seqs``),
    the layout and normaliser the verl engine uses too (trainer/verl/rows.py).
    Returns mean stats over the optimizer steps."""
    model.train()
    stats: dict[str, list[float]] = {k: [] for k in ("loss/policy", "loss/total", "train/entropy", "train/kl",
                                                    "train/clip_frac", "train/approx_kl", "train/grad_norm")}
    order = torch.arange(len(rollouts))
    k = max(1, min(mini_batches, len(rollouts)))
    agg = replace(agg, n_seqs=len(rollouts) / k)
    for _ in range(epochs):
        for idx in order.tensor_split(k):
            rows = [rollouts[i] for i in idx.tolist()]
            mb = collate(rows, pad_id, device)
            adv = advantages[idx].to(device)
            logp, entropy = policy_logprobs(model, rows, mb, temperature, pad_id)
            pg_loss, pg_stats = clipped_surrogate(logp, mb.old_logprobs, adv, mb.response_mask, eps_low, eps_high, agg)
            ent = agg(entropy, mb.response_mask)
            loss = pg_loss - entropy_coef * ent
            kl = torch.zeros(())
            if ref_model is not None and kl_coef > 0:
                with torch.no_grad():
                    ref_logp, _ = policy_logprobs(ref_model, rows, mb, temperature, pad_id, with_entropy=False)
                kl = agg(kl_k3(logp, ref_logp), mb.response_mask)
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
