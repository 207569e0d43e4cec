"""Decode attention without repeating the KV heads: one query token per row attends with the
query heads of each KV head packed into one matrix, so the cache is read once per step.

Why: a model with grouped-query attention (Qwen2.5-1.5B: 12 query heads on 2 KV heads) decoding
a padded batch passes an attention mask, and transformers' SDPA path before 5.2x then copies the
whole KV cache to every query head (``repeat_kv``) at every layer of every decode step, six
times the cache's bytes written and read again. Measured on one H200 (BENCHMARKS.md "Paper
scale"): 112 ms per decode step at 512 rows of Qwen2.5-1.5B, GRPO's generation 88% of its step.
Newer transformers packs the heads the same way (``pack_gqa``); this module gives every
supported transformers version that path.

``use_packed_gqa(model)`` registers :func:`packed_gqa_attention` under :data:`NAME` (with SDPA's
mask builder) and switches an ``sdpa`` model to it. Only the single-token query changes; every
other call (prefill, the update's forwards) goes to transformers' own SDPA function unchanged.
The math is the same attention: softmax(q K^T * scale + mask) V per query head, over the rows of
its KV head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "aero_packed_gqa"


def packed_gqa_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                         is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: query [B, H, q, D], key/value [B, Hkv, L, D],
    attention_mask [B, 1, q, L] (bool, True = attend) or None; returns ([B, q, H, D], None).

    For q = 1 the H query heads are reshaped to [B, Hkv, H / Hkv, D]: each KV head's group of
    query heads becomes the "positions" of one non-causal SDPA call, and the mask [B, 1, 1, L]
    broadcasts over them. Anything else is transformers' SDPA function."""
    groups = getattr(module, "num_key_value_groups", 1)
    if query.shape[2] != 1 or groups == 1 or kwargs.get("position_bias") is not None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    B, H, _, D = query.shape
    q = query.reshape(B, H // groups, groups, D)
    out = F.scaled_dot_product_attention(q, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling)
    return out.reshape(B, H, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def register() -> None:
    """Make :data:`NAME` a transformers attention implementation (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(NAME, packed_gqa_attention)
    AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def use_packed_gqa(model: torch.nn.Module) -> bool:
    """Switch a grouped-query-attention model on SDPA to :func:`packed_gqa_attention`. Returns
    whether it did (a model on eager attention, or without grouped heads, is left alone)."""
    config = getattr(model, "config", None)
    heads, kv = getattr(config, "num_attention_heads", None), getattr(config, "num_key_value_heads", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa" or not heads or not kv or kv == heads:
        return False
    register()
    config._attn_implementation = NAME
    return True
