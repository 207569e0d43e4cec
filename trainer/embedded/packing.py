"""The packed update forward: a micro-batch's sequences concatenated into one row (batch 1), with
position ids restarting at each sequence and attention kept inside each sequence
(trainer/embedded/packed_attention.py), so no layer computes a padded position.

Why: the padded forward pays rows x longest row. RL responses are ragged (on the tiny task a
mean of 3.7 tokens against a mini-batch's longest of 5-12; at paper scale geometric lengths
with mean ~600 cut at 1,536), so most of a padded pass can be padding. Packed, a micro-batch
costs its real tokens, and the token budget (``micro_batch_tokens``) counts real tokens
(:func:`packed_micro_batches`).

What stays the same: the log-probs and entropies come back in the padded layout of
:func:`trainer.embedded.forward.collate` ([N, T], zero off the response), so the loss code and
its normalisers are unchanged; the LM head runs only on the tokens that predict a response
token, in the same chunks as the padded path (``head_logprobs_flat``), never holding full-vocab
logits for more than one chunk. Every index is built on the host from the rollouts' own lists
and copied to the device without waiting for it: the packed forward makes no host sync.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.embedded.forward import head_logprobs_flat, lm_parts
from trainer.embedded.packed_attention import PACKED_MASK, PLAN_KW, AttentionPlan, attention_plan, can_pack, install
from trainer.rollout.base import Rollout


def packed_micro_batches(lengths: list[int], budget: int) -> list[list[int]]:
    """Split a mini-batch into micro-batches of at most ``budget`` real tokens (prompt +
    response, no padding): the memory bound of the padded micro-batches (trainer/embedded/
    update.py::micro_batches), counted on the packed row.

    When the whole mini-batch fits (or ``budget`` is 0), one micro-batch in the rows' order.
    Otherwise first-fit over the rows longest first: each row goes to the first micro-batch with
    room, so few micro-batches are nearly full; a row longer than the budget goes alone (the
    submit rules refuse a budget below one row). Returns row indices covering every row once."""
    if budget <= 0 or sum(lengths) <= budget:
        return [list(range(len(lengths)))]
    parts: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        j = next((j for j, r in enumerate(room) if lengths[i] <= r), None)
        if j is None:
            parts.append([i])
            room.append(budget - lengths[i])
        else:
            parts[j].append(i)
            room[j] -= lengths[i]
    return parts


@dataclass(frozen=True)
class PackedRows:
    """Rollouts laid end to end in one row, and where their log-probs go.

    input_ids     [1, L] long  every row's prompt + response, row after row
    position_ids  [1, L] long  0 .. len_i - 1 within each row (RoPE sees each row as padded does)
    predict       [R] long     packed positions whose hidden state predicts a response token
    targets       [R] long     those response tokens (the token at predict + 1)
    place         [N, T] long  the padded layout (``collate``'s T): response token j of row i at
                               column p_i + j holds its index in the R values; R (a zero) elsewhere
    plan          the attention's sequences (trainer/embedded/packed_attention.py)
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    predict: torch.Tensor
    targets: torch.Tensor
    place: torch.Tensor
    plan: AttentionPlan

    def to(self, device: torch.device) -> PackedRows:
        """Host-to-device without waiting for the device (the tensors are never written again)."""
        move = lambda t: t.to(device, non_blocking=True)  # noqa: E731
        return PackedRows(move(self.input_ids), move(self.position_ids), move(self.predict), move(self.targets),
                          move(self.place), self.plan.to(device))


def pack_rows(rollouts: list[Rollout]) -> PackedRows:
    """:class:`PackedRows` of ``rollouts`` on the host. Every row needs a prompt token: it is
    what predicts the first response token (the padded path gives that token no log-prob)."""
    p = torch.tensor([len(r.prompt_ids) for r in rollouts], dtype=torch.long)
    q = torch.tensor([len(r.response_ids) for r in rollouts], dtype=torch.long)
    if len(rollouts) == 0 or int(p.min()) < 1:
        raise ValueError("packed rows need at least one rollout, each with a prompt token")
    lens = p + q
    starts = torch.cumsum(lens, 0) - lens
    ids = torch.tensor([t for r in rollouts for t in (*r.prompt_ids, *r.response_ids)], dtype=torch.long)
    L, R = len(ids), int(q.sum())
    positions = torch.arange(L) - torch.repeat_interleave(starts, lens)
    row = torch.repeat_interleave(torch.arange(len(rollouts)), q)  # row of each response token
    j = torch.arange(R) - torch.repeat_interleave(torch.cumsum(q, 0) - q, q)  # its index in the response
    target_at = starts[row] + p[row] + j  # its packed position
    place = torch.full((len(rollouts), int(lens.max())), R, dtype=torch.long)
    place[row, p[row] + j] = torch.arange(R)
    return PackedRows(input_ids=ids[None], position_ids=positions[None], predict=target_at - 1,
                      targets=ids[target_at], place=place, plan=attention_plan(lens.tolist()))


def packs(model: torch.nn.Module) -> bool:
    """Whether the packed forward serves ``model``: a transformers causal LM (backbone + head)
    whose layers all use full attention."""
    return lm_parts(model) is not None and can_pack(model)


def packed_logprobs(model: torch.nn.Module, packed: PackedRows, temperature: float,
                    with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``sequence_logprobs`` over packed rows: (logp [N, T], entropy [N, T] or None) in the padded
    layout, zero off the response; equal up to float rounding (only the attention's batching and
    the matmul shapes, hence summation order, differ). ``packed`` on the model's device."""
    parts = lm_parts(model)
    if parts is None:
        raise ValueError("the packed forward needs a transformers causal LM (see packs)")
    base, head = parts
    install(model)
    hidden = base(input_ids=packed.input_ids, position_ids=packed.position_ids, attention_mask=PACKED_MASK,
                  use_cache=False, **{PLAN_KW: packed.plan}).last_hidden_state[0]
    lp, ent = head_logprobs_flat(head, hidden.index_select(0, packed.predict), packed.targets, temperature,
                                 with_entropy)
    zero = lp.new_zeros(1)
    return torch.cat([lp, zero])[packed.place], (torch.cat([ent, zero])[packed.place] if with_entropy else None)
