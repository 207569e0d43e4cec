"""The embedded sampler's slot-cache decode: one core under the static decode
(``HFSampler(decode="static" | "graphs")``: every row of a call joins at once) and the continuous
batch (``HFSampler.stream``, trainer/rollout/continuous.py: rows join as their blocks are asked for).

The dynamic decode (trainer/rollout/embedded.py) grows a transformers DynamicCache by one
concatenation per layer per step, re-indexes it to the live rows, and reads ``done.all()`` on the
host every step (plus two syncs inside ``torch.multinomial``). This core instead:

* preallocates the KV cache, per layer [rows, kv_heads, prompt + max_new_tokens, head_dim]
  (:class:`SlotCache`); a joining row copies its prompt's prefill, and each step writes every
  row's keys and values into that row's next slot in place, so rows at different tokens share a batch;
* keeps finished rows in the forward batch, masked, and shrinks the batch only to the next of a
  fixed ladder of batch sizes (:func:`bucket_sizes`), so a call sees a handful of shapes; with
  ``graphs`` each step has shapes that depend on its size only and is replayed as one CUDA graph
  per size (trainer/rollout/decode_graphs.py; elsewhere the same step runs eagerly);
* samples on the device without a host sync (trainer/rollout/sampling.py, keyed.py) and reads the
  host only every ``sync_every`` steps: to hand finished rows out, let waiting rows join and shrink
  the batch. Steps run past the last finish are undone on the generator, so it stands where the
  dynamic decode leaves it.

Same generator, same tokens: the first token comes from the same prefill; every step draws the
exponentials of all B rows in row order, as ``torch.multinomial`` over the B rows does, and each
live row takes its token from its own draws. With per-row keys a row's tokens depend on its key
only, so a continuous batch samples what separate calls sample. Log-probs agree to float rounding
(the forward batch differs from the dynamic decode's, and with graphs so does the attention's key
count: the eager step attends over the slots written so far only, the fixed-shape step over the
whole capacity). tests/trainer/rollout/test_decode_paths.py holds every path to this.

Attention: the decode builds the 4D mask itself (boolean for SDPA and the packed grouped-query
path, additive for eager attention), which transformers takes as already prepared;
models on other attention functions, or with sliding-window layers, must use the dynamic decode.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import torch

from trainer.rollout.attention import NAME as PACKED_GQA
from trainer.rollout.base import SamplingParams
from trainer.rollout.keyed import sample_keyed
from trainer.rollout.sampling import exponential_draws, sample_with_draws

DECODES = ("dynamic", "static", "graphs")


@dataclass(frozen=True)
class StaticSettings:
    """The engine's settings one static decode call needs (sync_every already resolved)."""

    pad_id: int
    stop_ids: torch.Tensor  # [n] long, on the decode's device
    cache_kw: str  # the forward's keyword for the KV cache (trainer/rollout/kv_cache.py::forward_kwargs)
    compact_at: float  # the batch shrinks once about this fraction of it has finished (> 1: never)
    sync_every: int  # steps between host reads
    graphs: bool  # replay each decode step as a CUDA graph per batch size (CUDA only)


@dataclass
class Prefill:
    """One forward over each distinct prompt: its last-position logits [U, V], its KV cache, the
    left-padded mask and positions [U, L], and ``expand`` [B] (each row's distinct prompt)."""

    logits: torch.Tensor
    cache: Any
    mask: torch.Tensor
    pos: torch.Tensor
    expand: torch.Tensor


def bucket_sizes(rows: int, ratio: float, multiple: int = 1) -> list[int]:
    """The batch sizes a decode may shrink to, in ascending order: from ``rows`` down, each about
    ``ratio`` times the one above, rounded up to a multiple of ``multiple``, down to ``multiple``.

    Why a ladder: a batch that shrinks to its exact live count has a new shape at every finish,
    and a CUDA graph per shape would be captured more often than replayed; shrinking by a fixed
    ratio bounds the rows computed at 1/ratio of the live ones with O(log rows) shapes. On CUDA
    ``multiple`` = 8 keeps the shapes tensor-core friendly and fewer. ``ratio <= 0``: never shrink."""
    sizes = [rows]
    while ratio > 0 and sizes[-1] > multiple:
        s = sizes[-1]
        nxt = max(multiple, -(-math.ceil(s * ratio) // multiple) * multiple)
        if nxt >= s:  # a ratio near 1 still steps down
            nxt = (s - 1) // multiple * multiple
        if nxt < 1:
            break
        sizes.append(nxt)
    return sizes[::-1]


def pick_bucket(sizes: list[int], live: int) -> int:
    """The smallest size of the ascending ``sizes`` that holds ``live`` rows."""
    return sizes[min(bisect_left(sizes, live), len(sizes) - 1)]


def layer_kv(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's (keys, values) [U, H, L, D] of a DynamicCache, in either transformers layout
    (``layers`` since 4.56, ``key_cache``/``value_cache`` before)."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def mask_kind(model: torch.nn.Module) -> str:
    """'bool' or 'additive': the 4D mask the model's attention function takes. Raises for the
    attention functions this decode does not build masks for, and for sliding-window layers."""
    config = model.config
    impl = getattr(config, "_attn_implementation", None) or "eager"
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()) or \
            getattr(config, "use_sliding_window", False):
        raise ValueError("the static decode masks full attention only; this model has sliding-window layers: "
                         "use rollout.decode=dynamic")
    if impl in ("sdpa", PACKED_GQA):
        return "bool"
    if impl == "eager":
        return "additive"
    raise ValueError(f"the static decode builds attention masks for sdpa and eager attention; this model uses "
                     f"{impl!r}: use rollout.decode=dynamic")


def as_4d(keep: torch.Tensor, kind: str, dtype: torch.dtype) -> torch.Tensor:
    """[b, K] bool (True = attend) -> [b, 1, 1, K]: boolean, or 0 / dtype-min additive (eager)."""
    if kind == "additive":
        keep = torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill_(~keep, torch.finfo(dtype).min)
    return keep[:, None, None, :]


@dataclass
class RowOut:
    """One finished row: response tokens, log-probs, and whether a stop id ended it."""

    tokens: list[int]
    logprobs: list[float]
    finished: bool


class SlotCache:
    """A preallocated KV cache: per layer, keys and values [rows, kv_heads, capacity, head_dim].

    It duck-types the one method a transformers decoder layer calls on its cache, ``update``:
    each of the first ``rows`` rows writes the step's keys and values into its own slot
    ``slot[row]`` (a device tensor, so a CUDA graph replays the write at whatever slots the step
    sets), and attention reads the first ``rows`` rows and ``window`` slots. Later slots are zeros
    or stale and are masked, never read as keys. Rows start empty: :meth:`admit` fills them."""

    def __init__(self, kv: list[tuple[torch.Tensor, torch.Tensor]], rows: int, capacity: int):
        self.prompt_kv = kv
        self.keys = [k.new_zeros((rows, k.shape[1], capacity, k.shape[3])) for k, _ in kv]
        self.values = [v.new_zeros((rows, v.shape[1], capacity, v.shape[3])) for _, v in kv]
        self.rows, self.window = 0, capacity
        self.slot = torch.zeros(rows, dtype=torch.long, device=kv[0][0].device)
        self.at = torch.arange(rows, device=kv[0][0].device)

    def admit(self, at: torch.Tensor, prompt: torch.Tensor) -> None:
        """Rows ``at`` get the prefill of distinct prompts ``prompt`` in slots [0, L) (n samples
        of a prompt copy its one prefill)."""
        L = self.prompt_kv[0][0].shape[2]
        for buf, (k, v) in zip(self.keys, self.prompt_kv):
            buf[at, :, :L] = k.index_select(0, prompt)
        for buf, (k, v) in zip(self.values, self.prompt_kv):
            buf[at, :, :L] = v.index_select(0, prompt)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        k, v = self.keys[layer_idx][:self.rows], self.values[layer_idx][:self.rows]
        at, slot = self.at[:self.rows], self.slot[:self.rows]
        k[at, :, slot] = key_states[:, :, 0]
        v[at, :, slot] = value_states[:, :, 0]
        return k[:, :, :self.window], v[:, :, :self.window]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.window - 1  # tokens before the one being fed (for models that ask)

    def compact(self, keep: torch.Tensor) -> None:
        """Move rows ``keep`` (positions in the current batch) to the front: the batch is then
        the first ``len(keep)`` rows, at the same addresses (a captured graph still reads them)."""
        n = len(keep)
        for buf in self.keys + self.values:
            buf[:n] = buf[:self.rows].index_select(0, keep)
        self.rows = n


class Batch:
    """The decode's state per position of the forward batch (the first ``b`` of C): its row (host
    ``row``, device ``row_of``), key, prompt mask, last prompt position, the step it joined at,
    the tokens it sampled (``n``, ``tokens``, ``logprobs``) and done. A position holds one row
    from joining to the host read after it finished (then it is ``free`` for a joining row).

    ``keyed``: rows sample from their keys (trainer/rollout/keyed.py); else from ``generator``
    (None: greedy), drawn for all C rows, which must then all join at once (the static decode).
    ``refill``: rows may join mid-decode (the continuous batch), so CUDA graphs of every size are kept."""

    def __init__(self, model: torch.nn.Module, pre: Prefill, sampling: SamplingParams, settings: StaticSettings,
                 capacity: int, generator: torch.Generator | None = None, keyed: bool = False, refill: bool = False):
        self.kind = mask_kind(model)
        L, S, dev = pre.mask.shape[1], int(sampling.max_new_tokens), pre.mask.device
        self.model, self.pre, self.sampling, self.settings = model, pre, sampling, settings
        self.C, self.L, self.S, self.b, self.steps, self.last_join = capacity, L, S, 0, 0, 0
        self.gen, self.keyed, self.longest = generator, keyed, 0
        # steps run past the last finish (a read every k steps overshoots) are undone on the generator
        self.rewind = generator if generator is not None and settings.sync_every > 1 else None
        self.states: dict[int, torch.Tensor] = {}  # the generator's state before each step since the last read
        self.cache = SlotCache(layer_kv(pre.cache), capacity, L + S)
        pre.cache = None  # the rows copy the distinct prompts' prefill from the slot cache's own reference
        self.dtype = model.get_input_embeddings().weight.dtype  # type: ignore[operator]  # eager's mask dtype
        self.stop = set(settings.stop_ids.tolist())
        self.row, self.joined, self.free = [-1] * capacity, [0] * capacity, []

        def zeros(dtype, *shape):
            return torch.zeros((capacity, *shape), dtype=dtype, device=dev)

        self.row_of, self.key, self.last_pos, self.n, self.tok_in = (zeros(torch.long) for _ in range(5))
        self.done, self.prompt_mask = zeros(torch.bool), zeros(torch.bool, L)
        self.tokens = zeros(torch.long, S + 1)  # column S: where finished rows' unread draws land
        self.logprobs = zeros(torch.float32, S + 1)
        self.resp = torch.arange(S, device=dev)
        self.bad = torch.zeros((), dtype=torch.bool, device=dev)  # a non-finite log-prob was sampled
        self.sizes = bucket_sizes(capacity, 1.0 - settings.compact_at, 8 if settings.graphs else 1)
        self.run: Callable[[int], torch.Tensor] | None = None  # graphs: the fixed-shape step per size
        if settings.graphs:
            self.run = self.fixed_step
            if dev.type == "cuda":
                from trainer.rollout.decode_graphs import BucketGraphs

                self.run = BucketGraphs(self.fixed_step, grows=refill)

    def sample(self, logits: torch.Tensor, at: slice | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.rewind is not None:
            self.states[self.steps] = self.rewind.get_state()
        return sample_step(self, logits, at)

    def admit(self, rows: list[tuple[int, int, int]]) -> None:
        """Rows (row id, distinct prompt, key) join the forward batch, in the ``free`` positions
        first and then at its end; they sample their first token from their prompt's prefill
        logits. Reusing a position costs no copy of the live rows."""
        reused, self.free = self.free[:len(rows)], self.free[len(rows):]
        at_host = reused + list(range(self.b, self.b + len(rows) - len(reused)))
        dev = self.n.device
        at, prompt = (torch.tensor(x, dtype=torch.long, device=dev) for x in (at_host, [u for _, u, _ in rows]))
        self.cache.admit(at, prompt)
        self.row_of[at] = torch.tensor([r for r, _, _ in rows], dtype=torch.long, device=dev)
        self.key[at] = torch.tensor([k for _, _, k in rows], dtype=torch.int64, device=dev)
        self.prompt_mask[at] = self.pre.mask.index_select(0, prompt).bool()
        self.last_pos[at] = self.pre.pos[:, -1].index_select(0, prompt)
        for p, (r, _, _) in zip(at_host, rows):
            self.row[p], self.joined[p] = r, self.steps
        self.b, self.last_join = max(self.b, max(at_host) + 1), self.steps
        self.n[at] = 0
        tok, lp = self.sample(self.pre.logits.index_select(0, prompt), at)
        self.tokens[at, 0], self.logprobs[at, 0], self.tok_in[at] = tok, lp, tok
        self.n[at] = 1
        self.done[at] = torch.isin(tok, self.settings.stop_ids) | (self.S <= 1)
        self.bad |= ~torch.isfinite(lp).all()

    def step(self) -> None:
        """One decode step of every position in the batch: feed token n-1, sample token n."""
        b = self.b
        if self.run is not None:
            logits = self.run(pick_bucket(self.sizes, b))[:b]
        else:  # attend to the slots written so far only (a key count of L + n, as the dynamic decode)
            window = min(self.S, self.steps - min(self.joined[:b]) + 1)  # >= every row's n
            n = self.n[:b]
            self.cache.rows, self.cache.window = b, self.L + window
            self.cache.slot[:b] = self.L + n - 1
            logits = self.forward(b, torch.cat([self.prompt_mask[:b], self.resp[None, :window] < n[:, None]], dim=1))
        self.steps += 1
        self.record(*self.sample(logits, slice(0, b)))

    def forward(self, b: int, keep: torch.Tensor) -> torch.Tensor:
        """The model over the first ``b`` positions, attending to ``keep`` [b, K]: logits [b, V]."""
        n = self.n[:b]
        out = self.model(input_ids=self.tok_in[:b, None], attention_mask=as_4d(keep, self.kind, self.dtype),
                         position_ids=(self.last_pos[:b] + n)[:, None], use_cache=True,
                         **{self.settings.cache_kw: self.cache})
        return out.logits[:, -1]

    def fixed_step(self, bb: int) -> torch.Tensor:
        """The step over the first ``bb`` positions (a size of the ladder >= b) with shapes that
        depend on ``bb`` only, what a CUDA graph captures: every slot attended to, masked per row,
        and every slot index computed on the device. Positions past ``b`` hold no row, or a
        finished or moved one: they write only their own rows and their logits are not read."""
        n = self.n[:bb]
        self.cache.rows, self.cache.window = bb, self.L + self.S
        self.cache.slot[:bb] = (self.L + n - 1).clamp_(min=0)
        return self.forward(bb, torch.cat([self.prompt_mask[:bb], self.resp[None, :] < n[:, None]], dim=1))

    def record(self, tok: torch.Tensor, lp: torch.Tensor) -> None:
        """The batch's positions sampled ``tok``/``lp`` [b] as their token n (a finished row's
        land past its tokens, never read); n and done move on, and the tokens are fed next."""
        b = self.b
        n, was_done = self.n[:b], self.done[:b]
        self.tokens[:b].scatter_(1, n[:, None], tok[:, None])
        self.logprobs[:b].scatter_(1, n[:, None], lp[:, None])
        n += (~was_done).long()
        self.done[:b] = was_done | torch.isin(tok, self.settings.stop_ids) | (n >= self.S)
        self.tok_in[:b] = tok
        self.bad |= ~torch.isfinite(lp.masked_fill(was_done, 0.0)).all()

    def harvest(self, on_row: Callable[[int, RowOut], None]) -> int:
        """The host read: hands each row that finished since the last read to ``on_row(row id,
        its RowOut)`` and frees its position; returns how many rows still decode. Raises, as
        torch.multinomial does, when a log-prob was not finite (the no-sync samplers do not check)."""
        read = torch.cat([self.done[:self.b], self.bad[None]]).tolist()
        if read[-1]:
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        done, was_free = read[:-1], set(self.free)
        self.free = [i for i, d in enumerate(done) if d]
        new = [i for i in self.free if i not in was_free]
        if new:
            at = torch.tensor(new, dtype=torch.long, device=self.n.device)
            n = self.n.index_select(0, at).tolist()
            toks, lps = (buf[:, :max(n)].index_select(0, at).tolist() for buf in (self.tokens, self.logprobs))
            for j, i in enumerate(new):
                t, self.longest = toks[j][:n[j]], max(self.longest, n[j])
                on_row(self.row[i], RowOut(t, lps[j][:n[j]], bool(t) and t[-1] in self.stop))
        return len(done) - len(self.free)

    def shrink(self) -> None:
        """Shrink the forward batch to the smallest size of the ladder that holds the rows not
        yet read (they move to the front, in batch order; then finished ones)."""
        unread = self.b - len(self.free)
        new_b = pick_bucket(self.sizes, unread)
        if new_b >= self.b:
            return
        free = set(self.free)
        order = ([i for i in range(self.b) if i not in free] + self.free)[:new_b]
        keep = torch.tensor(order, dtype=torch.long, device=self.n.device)
        self.cache.rows = self.b
        self.cache.compact(keep)
        for buf in (self.row_of, self.key, self.prompt_mask, self.last_pos, self.n, self.done, self.tok_in,
                    self.tokens, self.logprobs):
            buf[:new_b] = buf[:self.b].index_select(0, keep)
        self.row[:new_b], self.joined[:new_b] = [self.row[i] for i in order], [self.joined[i] for i in order]
        self.b, self.free = new_b, list(range(unread, new_b))


def sample_step(s: Batch, logits: torch.Tensor, at: slice | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and log-probs of the batch's positions ``at`` from their logits [b, V]. With keys,
    each row draws from its own key at its token n. Else the exponentials are drawn for all C
    rows in row order (torch.multinomial over C rows draws them so), each row then takes its own:
    the generator's stream never depends on the batch. A generator on another device than the
    model draws there (as multinomial does), which costs a copy of the probabilities, and with it
    a sync, every step."""
    if s.keyed:
        return sample_keyed(logits, s.sampling, s.key[at], s.n[at])
    if s.gen is None:
        return sample_with_draws(logits, s.sampling, None)
    draws = exponential_draws(s.C, logits.shape[-1], s.gen, logits.device)
    if len(logits) < s.C:  # a shrunk batch (all C rows, before any shrink, are in row order)
        draws = draws.index_select(0, s.row_of[at].to(draws.device))
    return sample_with_draws(logits, s.sampling, draws)


def decode(s: Batch, queue: deque[tuple[int, int, int]], on_row: Callable[[int, RowOut], None]) -> None:
    """Decode until no row decodes and none waits: the rows of ``queue`` (row id, distinct prompt,
    key) join as positions free up, which ``on_row`` (called at each host read with every row
    that finished) may add to. The batch shrinks only while no row waits."""
    s.admit([queue.popleft() for _ in range(min(len(queue), s.C))])
    while True:
        if (s.steps + 1) % s.settings.sync_every == 0 or s.steps - s.last_join + 1 >= s.S:
            live = s.harvest(on_row)
            if queue:  # waiting rows take finished rows' positions, then the room left
                take = min(len(queue), len(s.free) + s.C - s.b)
                if take:
                    s.admit([queue.popleft() for _ in range(take)])
            elif not live:
                break
            else:
                s.shrink()
            s.states = {}
        s.step()
    if s.rewind is not None and s.longest < s.steps + 1:
        s.rewind.set_state(s.states[s.longest])


def resolve_generator(generator: torch.Generator | None, device: torch.device) -> torch.Generator:
    """The generator torch.multinomial would use: the given one, else the device's default."""
    if generator is not None:
        return generator
    if device.type == "cuda":
        return torch.cuda.default_generators[device.index if device.index is not None else torch.cuda.current_device()]
    return torch.default_generator


def decode_static(model: torch.nn.Module, pre: Prefill, sampling: SamplingParams, generator: torch.Generator | None,
                  settings: StaticSettings, keys: torch.Tensor | None = None) -> list[RowOut]:
    """The static decode: every row of ``pre.expand`` joins at once and samples from
    ``generator``, or from its key of ``keys`` [B]. Returns each row's :class:`RowOut`, in row order."""
    B, keyed = len(pre.expand), keys is not None
    gen = resolve_generator(generator, pre.expand.device) if sampling.temperature > 0 and not keyed else None
    out: list[Any] = [None] * B
    rows = zip(range(B), pre.expand.tolist(), keys.tolist() if keys is not None else [0] * B)
    decode(Batch(model, pre, sampling, settings, B, gen, keyed), deque(rows), out.__setitem__)
    return out
