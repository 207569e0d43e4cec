"""Feeding a transformers causal LM prompts and a KV cache: what the rollout sampler does and the
policy update shares (the embedded engine already imports trainer/rollout/; this module imports
torch and nothing of the project, so either side may use it).

The sampler (trainer/rollout/embedded.py) prefills each distinct prompt once, left-padded, and
decodes its rows from the prompt's KV cache. The update (trainer/embedded/update.py,
``shared_prompt_logprobs``) does the same to score rollouts: each distinct prompt runs once and
its rows continue from the prompt's cache. Both must pad and position the prompts identically
(a padded row gets the positions of an unpadded one, so the numbers match right-padded
training) and must name the cache the way the installed transformers does.
"""

from __future__ import annotations

import inspect

import torch


def left_pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-pad token lists. Returns input_ids, attention_mask, position_ids, each [B, L].

    position_ids = clamp(cumsum(mask) - 1, min=0): the first real token is position 0."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), pos.to(device)


def forward_kwargs(model: torch.nn.Module) -> tuple[str, str | None]:
    """Keyword names this transformers version uses for the KV cache and for last-k logits
    (``cache``/``past_key_values``; ``logits_to_keep``/``num_logits_to_keep``/none)."""
    params = inspect.signature(model.forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"
    keep_kw = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)
    return cache_kw, keep_kw


def output_cache(out):
    """The KV cache of a forward's output, under whichever name this transformers version
    returns it (``cache`` or ``past_key_values``)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


__all__ = ["forward_kwargs", "left_pad", "output_cache"]
