"""DataProto row operations for variable-size AERO batches on verl.

Two different paddings, for two different reasons:

* **Generation** (:func:`generate_rows`): verl's AgentLoopManager splits a batch into
  ``rollout.agent.num_workers`` equal chunks (``DataProto.chunk`` asserts divisibility). A
  rescue round asks for an arbitrary number of rows, so the request is padded to that divisor
  with copies of its own rows (verl's ``pad_dataproto_to_divisor``) and the outputs of the pad
  rows are dropped right after (``unpad_dataproto``). They cost generation, never training;
  :class:`GenCount` counts them.
* **Training** (:func:`pad_masked`): the curated batch must split evenly over data-parallel
  ranks and mini-batches. It is padded with *masked* rows: two attended tokens (one prompt, one
  response slot), zero response mask, zero reward, a unique uid (a singleton group, advantage 0) and ``is_pad`` True. A
  masked row adds nothing to any loss or to the token counts; a duplicated real row would
  be trained twice, which is why it is never used here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from trainer.core.aero import is_correct

PAD_UID = "__aero_pad__"


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


def pad_masked(batch, multiple: int, pad_token_id: int):
    """Pad ``batch`` to a multiple of ``multiple`` rows with masked rows (module docstring).

    Needs the generation columns (input_ids, attention_mask, position_ids, responses,
    response_mask); any other float column (rm_scores, token_level_*, reward_baselines...) is
    zero on pad rows, NaN for reward_baselines. Returns (padded batch, number of pad rows);
    ``is_pad`` marks them in ``non_tensor_batch``.
    """
    from verl import DataProto

    B = len(batch)
    n_pad = (-B) % multiple
    if "is_pad" not in batch.non_tensor_batch:
        batch.non_tensor_batch["is_pad"] = np.zeros(B, dtype=bool)
    if n_pad == 0:
        return batch, 0
    template = batch.select_idxs(np.zeros(n_pad, dtype=np.int64))  # shapes and dtypes only
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
    if "reward_baselines" in t.keys():
        t["reward_baselines"].fill_(float("nan"))
    nt = template.non_tensor_batch
    nt["uid"] = np.array([f"{PAD_UID}{B + i}" for i in range(n_pad)], dtype=object)
    nt["is_pad"] = np.ones(n_pad, dtype=bool)
    return spread_pads(DataProto.concat([batch, template])), n_pad


def spread_pads(batch):
    """Reorder so pad rows sit at evenly spaced positions, real rows keeping their order.

    verl hands each data-parallel rank a contiguous chunk and each rank cuts it into contiguous
    mini-batches; pads bunched at one end could fill a whole global mini-batch, whose token
    count (the token-mean denominator) would then be 0. Spread evenly, each global mini-batch
    of size M holds < M pads when there are fewer pads than mini-batches x ranks (always: pads
    < the divisor), so it keeps a real row."""
    pad = ~real_rows(batch)
    B, n_pad = len(batch), int(pad.sum())
    if n_pad == 0:
        return batch
    slots = np.zeros(B, dtype=bool)
    slots[((np.arange(n_pad) + 0.5) * B / n_pad).astype(np.int64)] = True
    order = np.empty(B, dtype=np.int64)
    order[slots] = np.flatnonzero(pad)
    order[~slots] = np.flatnonzero(~pad)
    batch.reorder(torch.as_tensor(order))
    return batch


def real_rows(batch) -> np.ndarray:
    """bool[B]: not a masked pad row."""
    pad = batch.non_tensor_batch.get("is_pad")
    return np.ones(len(batch), dtype=bool) if pad is None else ~np.asarray(pad, dtype=bool)


def unpad_masked(batch):
    """The real rows of a batch padded by :func:`pad_masked`, in order."""
    keep = real_rows(batch)
    return batch if keep.all() else batch.select_idxs(np.flatnonzero(keep))
