"""A continuous batch for the hf sampler (``HFSampler.stream``): rows join the decode while
others are mid-answer, so a step's later rounds (AERO's rescue) are rows joining one batch, not
new generate calls each with its own prefill, warm-up and tail of one long row.

The caller asks for *blocks* (n rollouts of one prompt, each with its sampling key). When every
row of a block has finished, ``react(block id, block, its rows)`` is called on the host and may ask
for more blocks; their rows wait in a queue and join as finished rows leave. The call ends when
no row is decoding and none waits.

The decode is the slot-cache core of trainer/rollout/static_decode.py, which the static decode
runs with every row joining at once; here rows join as their blocks are asked for, so the batch
shrinks only while no row waits. Every distinct prompt is prefilled once per call; a joining row
copies its prompt's keys and values and samples its first token from the prompt's prefill logits.
Rows sample with their keys (trainer/rollout/keyed.py): a row's tokens do not depend on when it
joined or what it shared the batch with, so this call samples what separate ``generate`` calls
with the same keys sample (tests/trainer/rollout/test_decode_paths.py), log-probs to float rounding.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from trainer.rollout.base import SamplingParams
from trainer.rollout.static_decode import Batch, Prefill, RowOut, StaticSettings, decode, mask_kind


@dataclass(frozen=True)
class Block:
    """``len(keys)`` rollouts of prompt ``prompt``, row i sampled with ``keys[i]``; ``round`` tags them."""

    prompt: int
    keys: tuple[int, ...]
    round: int = 0


React = Callable[[int, Block, list[RowOut]], Sequence[Block]]


def decode_stream(model: torch.nn.Module, pre: Prefill, first: Sequence[Block], react: React,
                  sampling: SamplingParams, settings: StaticSettings, capacity: int) -> None:
    """Decode ``first`` and every block ``react`` asks for in one continuous batch of at most
    ``capacity`` rows (module docstring); blocks are numbered in the order they are asked for.
    ``pre`` holds every distinct prompt a block may name (``Block.prompt`` indexes it)."""
    blocks: list[Block] = []
    rows: list[tuple[int, int]] = []  # row id -> (block, index in block)
    queue: deque[tuple[int, int, int]] = deque()
    done: dict[int, list[RowOut | None]] = {}  # block -> its rows, until the last one finishes

    def ask(new: Sequence[Block]) -> None:
        for blk in new:
            if not blk.keys:
                continue
            done[len(blocks)] = [None] * len(blk.keys)
            for i, k in enumerate(blk.keys):
                queue.append((len(rows), blk.prompt, k))
                rows.append((len(blocks), i))
            blocks.append(blk)

    def on_row(r: int, out: RowOut) -> None:
        bid, i = rows[r]
        done[bid][i] = out
        if all(o is not None for o in done[bid]):
            ask(react(bid, blocks[bid], done.pop(bid)))  # type: ignore[arg-type]

    ask(first)
    try:
        mask_kind(model)
    except ValueError as e:
        raise ValueError(f"{e.args[0].split(': use')[0]}: use rollout.schedule=calls (the continuous batch builds the "
                         "static decode's masks)") from None
    decode(Batch(model, pre, sampling, settings, capacity, keyed=True, refill=True), queue, on_row)
