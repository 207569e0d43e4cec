"""Attention over packed rows: several sequences laid end to end in one row (batch 1), each
attending only to its own earlier tokens (a block-diagonal causal mask, never materialised).

Why not transformers' own packed path: given restarting ``position_ids`` and no mask,
transformers 5.x builds the block-diagonal mask for SDPA and eager as a dense [L, L] tensor
(``masking_utils.find_packed_sequence_indices``), and the attention then computes every one of
the L^2 scores: a 65,536-token packed row would need a 4 GiB mask and 2^32 scores per head,
where its sequences need sum(len_i^2). FlexAttention's ``create_block_mask`` skips the empty
blocks, but only under ``torch.compile`` (eager flex attention computes the full score matrix),
which the CPU engine does not use. So here the packed row's queries, keys and values are cut
back into their sequences for the attention alone: sequences of one length class (lengths in
(2^(k-1), 2^k]) are gathered into one right-padded [n, heads, width, dim] batch and run through
transformers' SDPA function with ``is_causal`` and no mask (right padding sits after every real
key, so causality alone keeps each real query off it), then scattered back to the packed row.
Every other layer (projections, MLP, norms, the LM head) runs on the real tokens only. The
padding the attention still sees is under 2x each class's real tokens; the scores are
sum over classes of n x width^2, the cost of padded attention per class, not of the packed row.

On CUDA the same path runs SDPA's fused kernels (flash or memory-efficient: ``is_causal``
without a mask admits them). A model loaded with ``attn_implementation="flash_attention_2"``
(flash-attn installed) instead gets flash-attn's varlen kernel through transformers' own
padding-free path (``cu_seq_lens_q`` / ``max_length_q``): no gather at all.

:func:`install` switches a model to :func:`packed_name` of its implementation once; the
function registered there serves a packed call (one that carries an :class:`AttentionPlan`
under :data:`PLAN_KW`) as above and hands every other call (padded update, prefill, decode) to
the model's own implementation unchanged. The plan travels with the layer's keyword arguments,
so activation checkpointing recomputes the same attention in backward.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import Any

import torch

PREFIX = "aero_packed_rows:"
PLAN_KW = "aero_packed_plan"
# A 4D mask is taken as prepared by transformers (``masking_utils._preprocess_mask_arguments``),
# so passing this one keeps it from building the dense block-diagonal mask for a packed call;
# the packed path never reads it.
PACKED_MASK = torch.ones(1, 1, 1, 1, dtype=torch.bool)


@dataclass(frozen=True)
class SegmentGroup:
    """Sequences of one length class, as a right-padded batch over the packed row.

    gather  [n, width] long  packed position of each slot (past a sequence's end: its last
                             token, a real key that causality keeps every real query off)
    valid   [k] long         flat slots (row * width + t) holding real tokens, in packed order
    """

    gather: torch.Tensor
    valid: torch.Tensor

    def to(self, device: torch.device) -> SegmentGroup:
        return SegmentGroup(self.gather.to(device, non_blocking=True), self.valid.to(device, non_blocking=True))


@dataclass(frozen=True)
class AttentionPlan:
    """How one packed row's attention runs (host-built, see :func:`attention_plan`).

    groups      the length classes (:class:`SegmentGroup`), longest first
    restore     [L] long: packed position p's row in the groups' concatenated outputs
    cu_seqlens  [n + 1] int32: sequence boundaries, for flash-attn's varlen kernel
    max_len     the longest sequence
    """

    groups: tuple[SegmentGroup, ...]
    restore: torch.Tensor
    cu_seqlens: torch.Tensor
    max_len: int

    def to(self, device: torch.device) -> AttentionPlan:
        return AttentionPlan(tuple(g.to(device) for g in self.groups), self.restore.to(device, non_blocking=True),
                             self.cu_seqlens.to(device, non_blocking=True), self.max_len)


def length_classes(lengths: list[int]) -> list[list[int]]:
    """Sequence indices grouped by length class ``(len - 1).bit_length()`` (lengths in
    (2^(k-1), 2^k]), longest class first, indices ascending within a class. Within a class the
    longest is under twice the shortest, so padding a class to its longest at most doubles it."""
    classes: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        classes.setdefault((n - 1).bit_length(), []).append(i)
    return [classes[k] for k in sorted(classes, reverse=True)]


def attention_plan(lengths: list[int]) -> AttentionPlan:
    """The plan for sequences of ``lengths`` laid end to end, on the host (no device sync)."""
    if not lengths or min(lengths) < 1:
        raise ValueError(f"packed sequences need at least one token each; got lengths {lengths}")
    lens = torch.tensor(lengths, dtype=torch.long)
    starts = torch.cumsum(lens, 0) - lens
    groups, order = [], []
    for idx in length_classes(lengths):
        s, n = starts[idx], lens[idx]
        t = torch.arange(int(n.max()))
        gather = s[:, None] + torch.minimum(t[None, :], n[:, None] - 1)
        valid = (t[None, :] < n[:, None]).flatten().nonzero()[:, 0]
        groups.append(SegmentGroup(gather, valid))
        order.append(gather.flatten()[valid])
    restore = torch.empty(int(lens.sum()), dtype=torch.long)
    flat = torch.cat(order)
    restore[flat] = torch.arange(len(flat))
    cu = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lens, 0)]).to(torch.int32)
    return AttentionPlan(tuple(groups), restore, cu, max(lengths))


def grouped_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 plan: AttentionPlan, dropout: float, scaling: float | None) -> torch.Tensor:
    """query [1, H, L, D], key/value [1, Hkv, L, D] of one packed row -> [1, L, H, D]: each
    sequence attends causally to itself only, one SDPA call per length class."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    H, D = query.shape[1], value.shape[-1]
    outs = []
    for g in plan.groups:
        n, width = g.gather.shape
        flat = g.gather.flatten()

        def rows(x: torch.Tensor) -> torch.Tensor:  # [1, h, L, d] -> [n, h, width, d]
            return x[0].index_select(1, flat).unflatten(1, (n, width)).transpose(0, 1)

        out, _ = sdpa_attention_forward(module, rows(query), rows(key), rows(value), None, dropout=dropout,
                                        scaling=scaling, is_causal=True)  # [n, width, H, D]
        outs.append(out.reshape(n * width, H, D).index_select(0, g.valid))
    return torch.cat(outs).index_select(0, plan.restore)[None]


def packed_name(inner: str) -> str:
    """The registered name of the packed-rows attention over the implementation ``inner``."""
    return PREFIX + inner


def inner_function(module: torch.nn.Module, inner: str):
    """The attention function ``inner`` names for ``module``'s model: a registered one, or for
    "eager" the model's own ``eager_attention_forward`` (transformers keeps eager per modeling
    file, as the default of ``AttentionInterface.get_interface``, not in the registry)."""
    cls: Any = type(module)
    return _inner_of_class(cls, inner)


@functools.lru_cache(maxsize=64)
def _inner_of_class(cls: Any, inner: str):
    # cached: the unpacked calls include every decode step's every layer
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    eager: Any = getattr(sys.modules[cls.__module__], "eager_attention_forward", None)
    return ALL_ATTENTION_FUNCTIONS.get_interface(inner, eager)


def packed_rows_attention(inner: str):
    """transformers' attention-function contract over ``inner``: a call with a plan under
    :data:`PLAN_KW` is a packed row (:func:`grouped_sdpa`, or flash-attn's varlen kernel when
    ``inner`` is a flash-attention implementation); any other call is ``inner``'s, unchanged."""
    def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                  **kwargs) -> tuple[torch.Tensor, None]:
        plan = kwargs.pop(PLAN_KW, None)
        if plan is None:
            return inner_function(module, inner)(module, query, key, value, attention_mask, dropout=dropout,
                                                 scaling=scaling, **kwargs)
        if kwargs.get("sliding_window") is not None:
            raise ValueError("packed rows do not support sliding-window attention layers")
        if inner.startswith("flash_attention"):
            cu = plan.cu_seqlens
            return inner_function(module, inner)(module, query, key, value, None, dropout=dropout, scaling=scaling,
                                                 cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=plan.max_len,
                                                 max_length_k=plan.max_len, **kwargs)
        return grouped_sdpa(module, query, key, value, plan, dropout, scaling), None

    return attention


def can_pack(model: torch.nn.Module) -> bool:
    """Whether :func:`install` can serve ``model``: a transformers model whose layers all use full
    attention (a sliding-window layer would need its window inside each sequence)."""
    config = getattr(model, "config", None)
    name = getattr(config, "_attn_implementation", None)
    return isinstance(name, str) and "sliding_attention" not in (getattr(config, "layer_types", None) or ())


def install(model: torch.nn.Module) -> None:
    """Switch ``model`` to the packed-rows attention over its own implementation (idempotent).
    The mask builder stays the inner implementation's, so unpacked calls get their usual masks."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    config: Any = model.config
    inner = config._attn_implementation
    if inner.startswith(PREFIX):
        return
    name = packed_name(inner)
    AttentionInterface.register(name, packed_rows_attention(inner))
    if inner in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[inner])
    config._attn_implementation = name
