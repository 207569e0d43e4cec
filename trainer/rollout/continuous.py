"""A continuous batch for the hf sampler (``HFSampler.stream``): rows join the decode while
others are mid-answer, so a step's later rounds (AERO's rescue) are rows joining one batch, not
new generate calls each with its own prefill, warm-up and tail of one long row.

The caller asks for *blocks* (n rollouts of one prompt, each with its sampling key). When every
row of a block has finished, ``react(block id, block, its rows)`` is called on the host and may ask
for more blocks; their rows wait in a queue and join as finished rows leave. The call ends when
no row is decoding and none waits.

The decode is the static decode's (trainer/rollout/static_decode.py) with one position per row:
a preallocated KV cache of ``capacity`` rows [C, kv_heads, L + max_new, head_dim] whose rows are
at different tokens, so each row writes its own slot (:class:`StreamCache`) and masks its own
slots. Every distinct prompt is prefilled once per call; a joining row copies its prompt's keys
and values and samples its first token from the prompt's prefill logits. Rows sample with their
keys (trainer/rollout/keyed.py): a row's tokens do not depend on when it joined or what it shared
the batch with, so this call samples what separate ``generate`` calls with the same keys sample
(tests/trainer/rollout/test_continuous.py), log-probs to float rounding.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from trainer.rollout.base import SamplingParams
from trainer.rollout.keyed import sample_keyed
from trainer.rollout.static_decode import (
    Prefill, SlotCache, StaticSettings, as_4d, bucket_sizes, layer_kv, mask_kind, pick_bucket,
)


@dataclass(frozen=True)
class Block:
    """``len(keys)`` rollouts of prompt ``prompt``, row i sampled with ``keys[i]``; ``round`` tags them."""

    prompt: int
    keys: tuple[int, ...]
    round: int = 0


@dataclass
class RowOut:
    """One finished row: response tokens, log-probs, and whether a stop id ended it."""

    tokens: list[int]
    logprobs: list[float]
    finished: bool


React = Callable[[int, Block, list[RowOut]], Sequence[Block]]


class StreamCache(SlotCache):
    """:class:`SlotCache` whose rows are at different tokens: ``slot`` holds one write slot per row.
    Rows start empty; :meth:`admit` copies a prompt's prefill into a row."""

    def __init__(self, kv: list[tuple[torch.Tensor, torch.Tensor]], rows: int, capacity: int):
        self.prompt_kv = kv
        self.keys = [k.new_zeros((rows, k.shape[1], capacity, k.shape[3])) for k, _ in kv]
        self.values = [v.new_zeros((rows, v.shape[1], capacity, v.shape[3])) for _, v in kv]
        self.rows, self.window = 0, capacity
        self.slot = torch.zeros(rows, dtype=torch.long, device=kv[0][0].device)

    def admit(self, at: torch.Tensor, prompt: torch.Tensor) -> None:
        """Rows ``at`` get the prefill of distinct prompts ``prompt`` in slots [0, L)."""
        L = self.prompt_kv[0][0].shape[2]
        for buf, (k, v) in zip(self.keys, self.prompt_kv):
            buf[at, :, :L] = k.index_select(0, prompt)
        for buf, (k, v) in zip(self.values, self.prompt_kv):
            buf[at, :, :L] = v.index_select(0, prompt)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        k, v = self.keys[layer_idx][:self.rows], self.values[layer_idx][:self.rows]
        at, slot = torch.arange(self.rows, device=k.device), self.slot[:self.rows]
        k[at, :, slot] = key_states[:, :, 0]
        v[at, :, slot] = value_states[:, :, 0]
        return k[:, :, :self.window], v[:, :, :self.window]


class Stream:
    """The continuous batch's state: per position of the forward batch (the first ``b`` of C),
    its row, key, prompt mask and last prompt position, tokens sampled ``n``, and done."""

    def __init__(self, model: torch.nn.Module, pre: Prefill, sampling: SamplingParams, settings: StaticSettings,
                 capacity: int):
        L = pre.mask.shape[1]
        S, dev = int(sampling.max_new_tokens), pre.mask.device
        self.model, self.pre, self.sampling, self.settings = model, pre, sampling, settings
        self.C, self.L, self.S, self.b, self.n_done = capacity, L, S, 0, 0
        self.free: list[int] = []  # finished positions, read, that a joining row may take
        self.seen: set[int] = set()  # rows read out (finished and harvested)
        self.cache = StreamCache(layer_kv(pre.cache), capacity, L + S)
        pre.cache = None
        try:
            self.kind = mask_kind(model)
        except ValueError as e:
            raise ValueError(f"{e.args[0].split(': use')[0]}: use aero.schedule=calls (the continuous batch builds the "
                             "static decode's masks)") from None
        self.dtype = model.get_input_embeddings().weight.dtype  # type: ignore[operator]
        self.row = [-1] * capacity  # host: each position's row id
        self.joined = [0] * capacity  # host: the step each position's row joined at (bounds its n)
        self.steps = 0
        self.key = torch.zeros(capacity, dtype=torch.int64, device=dev)
        self.prompt_mask = torch.zeros((capacity, L), dtype=torch.bool, device=dev)
        self.last_pos = torch.zeros(capacity, dtype=torch.long, device=dev)
        self.n = torch.zeros(capacity, dtype=torch.long, device=dev)
        self.done = torch.zeros(capacity, dtype=torch.bool, device=dev)
        self.tok_in = torch.zeros(capacity, dtype=torch.long, device=dev)
        self.tokens = torch.full((capacity, max(S, 1)), settings.pad_id, dtype=torch.long, device=dev)
        self.logprobs = torch.zeros((capacity, max(S, 1)), dtype=torch.float32, device=dev)
        self.resp = torch.arange(S, device=dev)
        self.bad = torch.zeros((), dtype=torch.bool, device=dev)  # a non-finite log-prob was sampled
        self.run: Callable[[int], torch.Tensor] | None = None  # graphs: the fixed-shape step per bucket
        if settings.graphs:
            self.sizes = bucket_sizes(capacity, 1.0 - settings.compact_at, 8)
            self.run = self.fixed_step
            if dev.type == "cuda":
                from trainer.rollout.decode_graphs import BucketGraphs

                self.run = BucketGraphs(self.fixed_step, grows=True)
        self.done_host: list[bool] | None = None  # the last read of done, while it holds

    def _record(self, tok: torch.Tensor, lp: torch.Tensor) -> None:
        """The batch's positions sampled ``tok``/``lp`` [b] as their token n; rows already done keep theirs."""
        b = self.b
        n, was_done = self.n[:b], self.done[:b]
        at = n.clamp(max=self.S - 1)[:, None]
        self.tokens[:b].scatter_(1, at, torch.where(was_done, self.tokens[:b].gather(1, at)[:, 0], tok)[:, None])
        self.logprobs[:b].scatter_(1, at, torch.where(was_done, self.logprobs[:b].gather(1, at)[:, 0], lp)[:, None])
        n += (~was_done).long()
        self.done[:b] = was_done | torch.isin(tok, self.settings.stop_ids) | (n >= self.S)
        self.tok_in[:b] = tok
        self.bad |= ~torch.isfinite(lp).all()

    def admit(self, rows: list[tuple[int, int, int]]) -> None:
        """Rows (row id, distinct prompt, key) join the forward batch, in the ``free`` positions
        first (finished rows', already read) and then at its end; they sample their first token
        from their prompt's prefill logits. Reusing a position costs no copy of the live rows."""
        reused = self.free[:len(rows)]
        at_host = reused + list(range(self.b, self.b + len(rows) - len(reused)))
        dev = self.key.device
        prompt = torch.tensor([u for _, u, _ in rows], dtype=torch.long, device=dev)
        at = torch.tensor(at_host, dtype=torch.long, device=dev)
        self.cache.admit(at, prompt)
        self.key[at] = torch.tensor([k for _, _, k in rows], dtype=torch.int64, device=dev)
        self.prompt_mask[at] = self.pre.mask.index_select(0, prompt).bool()
        self.last_pos[at] = self.pre.pos[:, -1].index_select(0, prompt)
        for i, (r, _, _) in enumerate(rows):
            self.row[at_host[i]], self.joined[at_host[i]] = r, self.steps
        self.b = max(self.b, max(at_host) + 1)
        self.free = self.free[len(reused):]
        self.n_done -= len(reused)
        tok, lp = sample_keyed(self.pre.logits.index_select(0, prompt), self.sampling, self.key[at],
                               torch.zeros_like(at))
        self.tokens[at, 0], self.logprobs[at, 0], self.tok_in[at] = tok, lp, tok
        self.n[at] = 1
        self.done[at] = torch.isin(tok, self.settings.stop_ids) | (self.S <= 1)
        self.bad |= ~torch.isfinite(lp).all()
        self.done_host = None

    def step(self) -> None:
        """One decode step of every position in the batch: feed token n-1, sample token n."""
        b = self.b
        if self.run is not None:
            logits = self.run(pick_bucket(self.sizes, b))[:b]
        else:
            window = min(self.S, self.steps - min(self.joined[:b]) + 1)  # >= every row's n
            n = self.n[:b]
            self.cache.rows, self.cache.window = b, self.L + window
            self.cache.slot[:b] = self.L + n - 1
            keep = torch.cat([self.prompt_mask[:b], self.resp[None, :window] < n[:, None]], dim=1)
            logits = self.forward(b, keep)
        tok, lp = sample_keyed(logits, self.sampling, self.key[:b], self.n[:b])
        self._record(tok, lp)
        self.steps += 1
        self.done_host = None

    def forward(self, b: int, keep: torch.Tensor) -> torch.Tensor:
        """The model over the first ``b`` positions, attending to ``keep`` [b, K]: logits [b, V]."""
        n = self.n[:b]
        out = self.model(input_ids=self.tok_in[:b, None], attention_mask=as_4d(keep, self.kind, self.dtype),
                         position_ids=(self.last_pos[:b] + n)[:, None], use_cache=True,
                         **{self.settings.cache_kw: self.cache})
        return out.logits[:, -1]

    def fixed_step(self, bb: int) -> torch.Tensor:
        """The step over the first ``bb`` positions (a bucket >= b) with shapes that depend on
        ``bb`` only, what a CUDA graph captures: every slot attended to, masked per row, and every
        slot index computed on the device. Positions past ``b`` hold no row, or a finished or
        moved one: they write only their own rows and their logits are not read."""
        n = self.n[:bb]
        self.cache.rows, self.cache.window = bb, self.L + self.S
        self.cache.slot[:bb] = (self.L + n - 1).clamp_(min=0)
        return self.forward(bb, torch.cat([self.prompt_mask[:bb], self.resp[None, :] < n[:, None]], dim=1))

    def harvest(self) -> list[tuple[int, list[int], list[float], bool]]:
        """The rows that finished since the last read (one host read): (row id, tokens, log-probs,
        stopped by a stop id)."""
        read = torch.cat([self.done[:self.b], self.bad[None]]).tolist()
        done, bad = read[:-1], read[-1]
        if bad:
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        self.done_host = done
        self.n_done = sum(done)
        self.free = [i for i, d in enumerate(done) if d]  # every finished position is read below
        new = [i for i, d in enumerate(done) if d and self.row[i] not in self.seen]
        if not new:
            return []
        at = torch.tensor(new, dtype=torch.long, device=self.key.device)
        n = self.n.index_select(0, at).tolist()
        toks = self.tokens.index_select(0, at).tolist()
        lps = self.logprobs.index_select(0, at).tolist()
        stop = set(self.settings.stop_ids.tolist())
        out = []
        for j, i in enumerate(new):
            self.seen.add(self.row[i])
            t = toks[j][:n[j]]
            out.append((self.row[i], t, lps[j][:n[j]], bool(t) and t[-1] in stop))
        return out

    def compact(self) -> None:
        """Drop finished positions from the forward batch (live ones move to the front, in order)."""
        done = self.done_host if self.done_host is not None else self.done[:self.b].tolist()
        # a row is dropped once read: one that finished on joining (its first token a stop) waits
        keep_host = [i for i, d in enumerate(done) if not (d and self.row[i] in self.seen)]
        if len(keep_host) == self.b:
            return
        keep = torch.tensor(keep_host, dtype=torch.long, device=self.key.device)
        self.cache.rows = self.b
        self.cache.compact(keep)
        for buf in (self.key, self.prompt_mask, self.last_pos, self.n, self.done, self.tok_in, self.tokens,
                    self.logprobs):
            buf[:len(keep_host)] = buf[:self.b].index_select(0, keep)
        self.row[:len(keep_host)] = [self.row[i] for i in keep_host]
        self.joined[:len(keep_host)] = [self.joined[i] for i in keep_host]
        self.b, self.n_done, self.free, self.done_host = len(keep_host), 0, [], None


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

    ask(first)
    s = Stream(model, pre, sampling, settings, capacity)
    s.admit([queue.popleft() for _ in range(min(len(queue), s.C))])
    while s.b:
        s.step()
        if s.steps % settings.sync_every:
            continue
        for r, toks, lps, stopped in s.harvest():  # the host read: who finished
            bid, i = rows[r]
            done[bid][i] = RowOut(toks, lps, stopped)
            if all(out is not None for out in done[bid]):
                ask(react(bid, blocks[bid], done.pop(bid)))  # type: ignore[arg-type]
        if queue:  # waiting rows take finished rows' positions, then the room left
            take = min(len(queue), len(s.free) + s.C - s.b)
            if take:
                s.admit([queue.popleft() for _ in range(take)])
        if not queue and s.n_done and (s.n_done == s.b or s.n_done >= settings.compact_at * s.b):
            s.compact()  # finished positions no row took
