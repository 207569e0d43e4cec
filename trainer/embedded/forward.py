"""Training batches from rollouts, and the log-prob forward pass the PPO ratio needs: the
training forward of the embedded engine's update (trainer/embedded/update.py, packing.py,
memory_plan.py). The sampler (trainer/rollout/) never uses it; the two share only how a prompt is
prefilled into a KV cache (trainer/rollout/kv_cache.py).

Alignment convention (shared with the engine and the losses): tensors are [N, T] over the
RIGHT-padded sequence prompt + response; a value at position t belongs to TOKEN t.
``response_mask[i, t] = 1`` exactly where token t is a response token of row i, and
``old_logprobs[i, t]`` / ``sequence_logprobs(...)[0][i, t]`` are log pi(token t | tokens < t),
computed from the logits at position t - 1 (a causal LM's logits at t predict token t + 1).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from trainer.rollout.base import Rollout

# Elements of a float32 [rows, positions, vocab] block handled at once by the log-prob /
# entropy kernel (64 MiB): bounds the temporaries when the vocab is ~150k.
CHUNK_ELEMENTS = 1 << 24
# On CUDA a block of 1 << 24 elements is ~110 tokens at the real 151,936-token vocab: too small a
# matmul to keep the GPU busy, and ~10 launches per block. 1 << 27 (~880 tokens, ~1.5 GiB of
# bf16 logits and fp32 temporaries) is still small beside an update's activations.
CUDA_CHUNK_ELEMENTS = 1 << 27


@dataclass
class TrainBatch:
    """Right-padded rollouts. N rows, T = max(prompt + response length).

    input_ids       [N, T] long   prompt + response, then pad_id
    attention_mask  [N, T] long   1 on prompt and response tokens
    response_mask   [N, T] float  1 on response tokens (EOS included), else 0
    old_logprobs    [N, T] float  the PPO ratio's old log-probs on response tokens, else 0: the
                                  behaviour policy's, or the proximal policy's for a row that has them
    behaviour_logprobs [N, T] float  the behaviour policy's (the same values when no row has proximal ones)
    prompt_lengths, response_lengths, lengths  [N] long (lengths = prompt + response)
    prompt_index    [N] long      Rollout.prompt_index
    rewards         [N] float     Rollout.reward
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    old_logprobs: torch.Tensor
    behaviour_logprobs: torch.Tensor
    prompt_lengths: torch.Tensor
    response_lengths: torch.Tensor
    lengths: torch.Tensor
    prompt_index: torch.Tensor
    rewards: torch.Tensor

    @property
    def num_rows(self) -> int:
        return self.input_ids.shape[0]

    @property
    def num_response_tokens(self) -> int:
        return int(self.response_lengths.sum())

    def to(self, device, non_blocking: bool = False) -> "TrainBatch":
        """``non_blocking`` for a host-to-device copy that need not wait for the device (never
        for device-to-host: the host could read the tensors before they arrive)."""
        moved = {f.name: getattr(self, f.name).to(device, non_blocking=non_blocking) for f in fields(self)
                 if f.name != "behaviour_logprobs"}
        shared = self.behaviour_logprobs is self.old_logprobs  # one copy when no row is stale
        behaviour = moved["old_logprobs"] if shared else self.behaviour_logprobs.to(device, non_blocking=non_blocking)
        return TrainBatch(**moved, behaviour_logprobs=behaviour)


def collate(rollouts: list[Rollout], pad_id: int, device=None) -> TrainBatch:
    """Right-pad ``rollouts`` into a TrainBatch (see the module docstring for alignment)."""
    if not rollouts:
        raise ValueError("collate needs at least one rollout")
    for r in rollouts:
        if len(r.logprobs) != len(r.response_ids):
            raise ValueError(f"rollout of prompt {r.prompt_index}: {len(r.logprobs)} logprobs for "
                             f"{len(r.response_ids)} response tokens")
    p_len = [len(r.prompt_ids) for r in rollouts]
    r_len = [len(r.response_ids) for r in rollouts]
    T = max(p + q for p, q in zip(p_len, r_len))
    ids, old, behaviour, resp = [], [], [], []
    stale = any(r.proximal_logprobs is not None for r in rollouts)  # else one tensor serves both
    for r, p, q in zip(rollouts, p_len, r_len):
        tail = T - p - q
        ids.append(r.prompt_ids + r.response_ids + [pad_id] * tail)
        old.append([0.0] * p + list(r.logprobs if r.proximal_logprobs is None else r.proximal_logprobs) + [0.0] * tail)
        if stale:
            behaviour.append([0.0] * p + list(r.logprobs) + [0.0] * tail)
        resp.append([0.0] * p + [1.0] * q + [0.0] * tail)
    old_t = torch.tensor(old, dtype=torch.float32)
    lengths = torch.tensor([p + q for p, q in zip(p_len, r_len)], dtype=torch.long)
    batch = TrainBatch(
        input_ids=torch.tensor(ids, dtype=torch.long),
        attention_mask=(torch.arange(T)[None, :] < lengths[:, None]).long(),
        response_mask=torch.tensor(resp, dtype=torch.float32),
        old_logprobs=old_t,
        behaviour_logprobs=torch.tensor(behaviour, dtype=torch.float32) if stale else old_t,
        prompt_lengths=torch.tensor(p_len, dtype=torch.long),
        response_lengths=torch.tensor(r_len, dtype=torch.long),
        lengths=lengths,
        prompt_index=torch.tensor([r.prompt_index for r in rollouts], dtype=torch.long),
        rewards=torch.tensor([float(r.reward) for r in rollouts], dtype=torch.float32),
    )
    return batch.to(device) if device is not None else batch


def _logprob_entropy_block(logits: torch.Tensor, targets: torch.Tensor, temperature: float,
                           with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [n, k, V], targets [n, k] -> (log p(target), entropy), each [n, k] float32 (float64
    for a float64 model).

    z = logits / T;  log p(y) = z_y - logsumexp(z);  H = logsumexp(z) - sum softmax(z) * z."""
    z = (logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits) / temperature
    lse = torch.logsumexp(z, dim=-1)
    logp = z.gather(-1, targets[..., None])[..., 0] - lse
    if not with_entropy:
        return logp, torch.zeros_like(logp)
    return logp, lse - (torch.softmax(z, dim=-1) * z).sum(-1)


def token_logprobs_and_entropy(logits: torch.Tensor, targets: torch.Tensor, temperature: float,
                               with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Memory-bounded log p(target) and entropy from logits [N, K, V] (targets [N, K]).

    Works in row blocks of at most CHUNK_ELEMENTS elements. With autograd on, each block is
    checkpointed, so backward keeps only the logits themselves (not the fp32 / softmax
    copies, which would be 2-3 extra [N, K, V] tensors) and recomputes the block."""
    N, K, V = logits.shape
    rows = max(1, CHUNK_ELEMENTS // max(1, K * V))
    grad = torch.is_grad_enabled() and logits.requires_grad
    outs = []
    for s in range(0, N, rows):
        args = (logits[s:s + rows], targets[s:s + rows], temperature, with_entropy)
        outs.append(checkpoint(_logprob_entropy_block, *args, use_reentrant=False) if grad
                    else _logprob_entropy_block(*args))
    return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])


def chunk_elements(device: torch.device) -> int:
    """Elements of one [tokens, vocab] block of the log-prob kernels on ``device``."""
    return CUDA_CHUNK_ELEMENTS if device.type == "cuda" else CHUNK_ELEMENTS


def lm_parts(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """(backbone, LM head) of a transformers causal LM: the backbone returns the final hidden
    states (``last_hidden_state``), the head maps them to the vocabulary. None for a model
    without that split; its callers then take the logits the model returns."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    base = getattr(model, "base_model", None)
    if head is None or base is None or base is model:
        return None
    return base, head


def _head_block(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden [n, H], targets [n] -> (log p(target), entropy), each [n] float32: one chunk's logits."""
    logp, ent = _logprob_entropy_block(head(hidden)[None], targets[None], temperature, with_entropy)
    return logp[0], ent[0]


def head_logprobs_and_entropy(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, keep: torch.Tensor,
                              temperature: float, with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(target) and entropy [N, K] from hidden states [N, K, H] at the positions ``keep``
    [N, K] (bool) only; exactly 0 elsewhere (:func:`head_logprobs_flat` on the kept tokens).
    Padding and prompt positions cost nothing here."""
    logps_flat, ents_flat = head_logprobs_flat(head, hidden[keep], targets[keep], temperature, with_entropy)
    zeros = torch.zeros(keep.shape, dtype=logps_flat.dtype, device=hidden.device)
    logp = zeros.masked_scatter(keep, logps_flat)
    return logp, (zeros.masked_scatter(keep, ents_flat) if with_entropy else torch.zeros_like(logp))


def head_logprobs_flat(head: torch.nn.Module, h: torch.Tensor, y: torch.Tensor, temperature: float,
                       with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(y) and entropy [n] from hidden states h [n, H] of the tokens that predict y [n].

    Full-vocab logits never exist for more than one chunk of tokens: the head runs on at most
    ``chunk_elements / V`` tokens at a time, and under autograd each chunk is checkpointed,
    so backward keeps only the hidden states and recomputes one chunk's logits at a time (the
    head's forward runs twice: ~5% more FLOPs at 1.5B, for memory that no longer grows with the
    rows: ~1.8 GB per 1,024-token row at the real vocab before). The idea of Liger's fused
    linear cross-entropy, without fusing the loss. The entropy is zeros without ``with_entropy``."""
    V = head.weight.shape[0]
    step = max(1, chunk_elements(h.device) // V)
    grad = torch.is_grad_enabled() and h.requires_grad
    logps, ents = [], []
    for s in range(0, max(len(h), 1), step):  # one (possibly empty) block at least: keeps the graph
        args = (head, h[s:s + step], y[s:s + step], temperature, with_entropy)
        lp, e = checkpoint(_head_block, *args, use_reentrant=False) if grad else _head_block(*args)
        logps.append(lp)
        ents.append(e)
    return torch.cat(logps), torch.cat(ents)


def _keep_kwarg(model: torch.nn.Module) -> str | None:
    params = inspect.signature(model.forward).parameters
    return next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)


def sequence_logprobs(model: torch.nn.Module, batch: TrainBatch, temperature: float,
                      with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One forward pass over a right-padded batch -> (logp [N, T], entropy [N, T] or None).

    logp[i, t] = log softmax(z_{t-1} / T)[input_ids[i, t]] and entropy[i, t] is the entropy of
    that same temperature-scaled distribution, on response positions (response_mask = 1);
    both are exactly 0 elsewhere. Matches the engine's sampling log-probs (full softmax, no
    top-p renormalisation). Differentiable when called with grad enabled. Logits are only
    produced for positions from min(prompt length) - 1 on (``logits_to_keep``), since earlier
    positions predict prompt tokens only. For a transformers causal LM the logits are never
    materialised whole: the backbone's hidden states go through the head in chunks of response
    tokens (:func:`head_logprobs_and_entropy`). The caller sets train/eval mode and autocast.
    """
    ids, mask = batch.input_ids, batch.attention_mask
    N, T = ids.shape
    start = max(int(batch.prompt_lengths.min()) - 1, 0)  # first position predicting a response token
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    parts = lm_parts(model)
    if parts is not None:
        base, head = parts
        hidden = base(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=False).last_hidden_state
        keep = batch.response_mask[:, start + 1:] > 0
        logp, ent = head_logprobs_and_entropy(head, hidden[:, start:-1], ids[:, start + 1:], keep, temperature,
                                              with_entropy)
        return F.pad(logp, (start + 1, 0)), (F.pad(ent, (start + 1, 0)) if with_entropy else None)
    keep_kw = _keep_kwarg(model)
    kw = {keep_kw: T - start} if keep_kw else {}
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=False, **kw).logits
    logits = logits[:, -(T - start):]  # a no-op when logits_to_keep was honoured
    logp, ent = token_logprobs_and_entropy(logits[:, :-1], ids[:, start + 1:], temperature, with_entropy)
    resp = batch.response_mask[:, start + 1:].to(logp.dtype)
    logp = F.pad(logp * resp, (start + 1, 0))
    return logp, (F.pad(ent * resp, (start + 1, 0)) if with_entropy else None)
