"""DataProto row operations for the variable-size batches of verl's curated loop (every method
whose spec does not say ``verl.stock_fit``: trainer/verl/trainer.py).

Two different paddings, for two different reasons:

* **Generation** (:func:`generate_rows`): verl's AgentLoopManager splits a batch into
  ``rollout.agent.num_workers`` equal chunks (``DataProto.chunk`` asserts divisibility). A
  rescue round asks for an arbitrary number of rows, so the request is padded to that divisor
  with copies of its own rows (verl's ``pad_dataproto_to_divisor``) and the outputs of the pad
  rows are dropped right after (``unpad_dataproto``). They cost generation, never training;
  :class:`GenCount` counts them.
* **Training** (:func:`pad_for_update`): the curated batch must split evenly over data-parallel
  ranks and mini-batches, and each of verl's mini-batches must hold the rows the embedded
  update's mini-batch holds, so both engines take the same optimizer steps. It is padded with
  *masked* rows (zero response mask, reward and advantage; a unique uid; ``is_pad`` True), which
  add nothing to any loss or token count; a duplicated real row would be trained twice.

The training rows carry their advantages (computed by the method step, trainer/verl/collect.py)
in :data:`ADV_COLUMN`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from trainer.core.strata import is_correct

PAD_UID = "__aero_pad__"
# [B] float32: each training row's advantage (0 on pad rows), whatever the method. It lives only
# in a step's batches (set by collect, read by the update and the metrics), never in a checkpoint
# or a data file, so nothing saved under its former name ("aero_advantages") needs reading back.
ADV_COLUMN = "precomputed_advantages"


@dataclass
class GenCount:
    """Engine calls and rows of one step: real rows asked for, pad rows added for the divisor."""

    calls: int = 0
    rows: int = 0
    pad_rows: int = 0


def row_correct(out) -> np.ndarray:
    """bool[B]: the verifier's accuracy (``acc`` from our compute_score) when the reward loop
    reported it, else whether the outcome reward rm_scores.sum(-1) is correct (``is_correct``).
    DAPO's overlong shaping changes rm_scores, never acc."""
    if "acc" in out.non_tensor_batch:
        return is_correct(out.non_tensor_batch["acc"])
    return is_correct(out.batch["rm_scores"].sum(-1).float().cpu().numpy())


def row_reward(out) -> np.ndarray:
    """float[B] outcome reward (rm_scores summed over the response)."""
    return out.batch["rm_scores"].sum(-1).float().cpu().numpy()


def response_lengths(out) -> np.ndarray:
    """int[B] response tokens per row (response_mask summed)."""
    return out.batch["response_mask"].sum(-1).long().cpu().numpy()


def generate_rows(generate: Callable, gen_batch, prompt_of_row: np.ndarray, divisor: int,
                  count: GenCount | None = None):
    """Generate one response for each entry of ``prompt_of_row`` (prompt indices into
    ``gen_batch``, prompt-major) in ONE engine call, padded to ``divisor`` and unpadded after.

    Returns the generated DataProto aligned with ``prompt_of_row`` (row r answers prompt
    ``prompt_of_row[r]``)."""
    from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto

    request = gen_batch.select_idxs(np.asarray(prompt_of_row, dtype=np.int64))
    padded, n_pad = pad_dataproto_to_divisor(request, divisor)
    out = unpad_dataproto(generate(padded), n_pad)
    if len(out) != len(prompt_of_row):
        raise RuntimeError(f"the rollout returned {len(out)} rows for {len(prompt_of_row)} requests")
    if count is not None:
        count.calls += 1
        count.rows += len(prompt_of_row)
        count.pad_rows += n_pad
    return out


def split_sizes(n_rows: int, mini_batches: int) -> list[int]:
    """Rows per mini-batch, as the embedded update splits them (``torch.tensor_split``: the first
    ``n_rows % k`` get one more); never more mini-batches than rows."""
    k = max(1, min(mini_batches, n_rows))
    return [n_rows // k + (1 if i < n_rows % k else 0) for i in range(k)]


@dataclass
class UpdateLayout:
    """How a curated batch is laid out for verl's update: ``mini_batches`` global mini-batches of
    ``mini_batch_size`` rows (real rows first-come as the embedded update splits them, then masked
    pad rows), dealt to ``dp`` ranks; ``rows_per_mini_batch`` is the seq-mean normaliser (real
    rows / mini-batches, as trainer.core.losses.aggregate's ``n_seqs``)."""

    mini_batches: int
    mini_batch_size: int
    n_pad: int
    rows_per_mini_batch: float


def pad_for_update(batch, mini_batches: int, dp: int, pad_token_id: int):
    """Pad ``batch`` with masked rows so that verl's global mini-batch j holds exactly the real
    rows of the embedded update's mini-batch j (:func:`split_sizes`), each mini-batch a multiple of
    ``dp`` rows, and order it for verl's dispatch: rank r takes a contiguous slice and cuts it into
    contiguous local mini-batches, so piece r of mini-batch j goes to position
    ``r * (rows per rank) + j * (rows per local mini-batch)``. Returns (padded batch, UpdateLayout).

    A masked row has two attended tokens (one prompt, one response slot), zero response mask,
    zero reward and advantage, a unique uid and ``is_pad`` True: it adds nothing to any loss or
    token count; a duplicated real row would be trained twice, which is why it is never used."""
    from verl import DataProto

    B = len(batch)
    sizes = split_sizes(B, mini_batches)
    k = len(sizes)
    local = -(-max(sizes) // dp)  # rows per rank per mini-batch
    M = local * dp
    n_pad = k * M - B
    batch.non_tensor_batch["is_pad"] = np.zeros(B, dtype=bool)
    if n_pad:
        batch = DataProto.concat([batch, masked_rows(batch, n_pad, pad_token_id)])
    # slot of each row: mini-batch j's rows (real then pads), piece r -> rank r
    starts = np.cumsum([0, *sizes[:-1]])
    pads = iter(range(B, B + n_pad))
    order = np.empty(k * M, dtype=np.int64)
    for j, (start, size) in enumerate(zip(starts, sizes)):
        rows = list(range(start, start + size)) + [next(pads) for _ in range(M - size)]
        for r in range(dp):
            pos = r * (k * local) + j * local
            order[pos:pos + local] = rows[r * local:(r + 1) * local]
    batch.reorder(torch.as_tensor(order))
    return batch, UpdateLayout(mini_batches=k, mini_batch_size=M, n_pad=n_pad, rows_per_mini_batch=B / k)


def masked_rows(batch, n: int, pad_token_id: int):
    """``n`` masked pad rows shaped like ``batch``'s (see :func:`pad_for_update`)."""
    template = batch.select_idxs(np.zeros(n, dtype=np.int64))  # shapes and dtypes only
    t = template.batch
    T_resp = t["responses"].shape[-1]
    L = t["input_ids"].shape[-1]
    for key in list(t.keys()):
        t[key] = torch.zeros_like(t[key])
    for key in ("input_ids", "responses", "prompts"):
        if key in t.keys():
            t[key].fill_(pad_token_id)
    # two attended tokens, the last prompt slot and the first response slot: verl's unpadding
    # assumes every row has a prompt token; the response mask stays 0, so nothing is trained
    t["attention_mask"][:, L - T_resp - 1: L - T_resp + 1] = 1
    nt = template.non_tensor_batch
    B = len(batch)
    nt["uid"] = np.array([f"{PAD_UID}{B + i}" for i in range(n)], dtype=object)
    nt["is_pad"] = np.ones(n, dtype=bool)
    return template


def real_rows(batch) -> np.ndarray:
    """bool[B]: not a masked pad row."""
    pad = batch.non_tensor_batch.get("is_pad")
    return np.ones(len(batch), dtype=bool) if pad is None else ~np.asarray(pad, dtype=bool)


def unpad_masked(batch):
    """The real rows of a batch padded by :func:`pad_for_update` (in its order)."""
    keep = real_rows(batch)
    return batch if keep.all() else batch.select_idxs(np.flatnonzero(keep))
