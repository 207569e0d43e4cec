"""The embedded sampler's static-shape decode (``HFSampler(decode="static" | "graphs")``).

The dynamic decode (trainer/rollout/embedded.py) grows a transformers DynamicCache by one
concatenation per layer per step, re-indexes it to the live rows, and reads ``done.all()`` on the
host every step (plus two syncs inside ``torch.multinomial``). This decode instead:

* preallocates the KV cache, per layer [rows, kv_heads, prompt + max_new_tokens, head_dim]
  (:class:`SlotCache`), and writes step t's keys and values into slot ``L + t - 1`` in place;
* keeps finished rows in the forward batch, masked, and shrinks the batch only to the next of a
  fixed ladder of batch sizes (:func:`bucket_sizes`), so a decode call sees a handful of shapes,
  one CUDA graph each (trainer/rollout/decode_graphs.py);
* samples on the device without a host sync (trainer/rollout/sampling.py) and reads the host only
  every ``sync_every`` steps, to stop and to shrink the batch. Steps run past the last finish are
  undone on the generator (:class:`Rewind`), so it stands where the dynamic decode leaves it.

Same generator, same tokens: the first token comes from the same prefill; every step draws the
exponentials of all B rows in row order, as ``torch.multinomial`` over the B rows does, and each
live row takes its token from its own draws. Log-probs agree to float rounding (the forward batch
differs from the dynamic decode's, and with graphs so does the attention's key count: the eager
step attends over the slots written so far only, the fixed-shape step over the whole capacity).

Attention: the decode builds the 4D mask itself (boolean for SDPA and the packed grouped-query
path, additive for eager attention), which transformers takes as already prepared;
models on other attention functions, or with sliding-window layers, must use the dynamic decode.
"""

from __future__ import annotations

import math
from bisect import bisect_left
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
    cache_kw: str  # the forward's keyword for the KV cache (trainer/kv_cache.py::forward_kwargs)
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
                         "use rollout_decode=dynamic")
    if impl in ("sdpa", PACKED_GQA):
        return "bool"
    if impl == "eager":
        return "additive"
    raise ValueError(f"the static decode builds attention masks for sdpa and eager attention; this model uses "
                     f"{impl!r}: use rollout_decode=dynamic")


def as_4d(keep: torch.Tensor, kind: str, dtype: torch.dtype) -> torch.Tensor:
    """[b, K] bool (True = attend) -> [b, 1, 1, K]: boolean, or 0 / dtype-min additive (eager)."""
    if kind == "additive":
        keep = torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill_(~keep, torch.finfo(dtype).min)
    return keep[:, None, None, :]


class SlotCache:
    """A preallocated KV cache: per layer, keys and values [rows, kv_heads, capacity, head_dim].

    It duck-types the one method a transformers decoder layer calls on its cache, ``update``:
    the step's keys and values go into slot ``slot`` (a device tensor, so a CUDA graph replays
    the write at whatever slot the step sets), and attention reads the first ``rows`` rows and
    ``window`` slots. Later slots are zeros or stale and are masked, never read as keys."""

    def __init__(self, kv: list[tuple[torch.Tensor, torch.Tensor]], expand: torch.Tensor, capacity: int):
        self.keys = [self._place(k, expand, capacity) for k, _ in kv]
        self.values = [self._place(v, expand, capacity) for _, v in kv]
        self.rows, self.window = len(expand), kv[0][0].shape[2]
        self.slot = torch.zeros(1, dtype=torch.long, device=expand.device)

    @staticmethod
    def _place(t: torch.Tensor, expand: torch.Tensor, capacity: int) -> torch.Tensor:
        """Each row's copy of its prompt's prefill (n samples share one), then room for the response."""
        buf = t.new_zeros((len(expand), t.shape[1], capacity, t.shape[3]))
        buf[:, :, :t.shape[2]] = t.index_select(0, expand)
        return buf

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        k, v = self.keys[layer_idx][:self.rows], self.values[layer_idx][:self.rows]
        k.index_copy_(2, self.slot, key_states)
        v.index_copy_(2, self.slot, value_states)
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


class DecodeState:
    """The decode's buffers. Per row, in row order: tokens and log-probs [B, S], lengths, done.
    Per position of the forward batch (the first ``b`` of B): ``row_of`` (its row), the token it
    feeds next, its last prompt position and its valid cache slots [B, L + S]."""

    def __init__(self, pre: Prefill, max_new: int, settings: StaticSettings, keys: torch.Tensor | None = None):
        B, L, dev = len(pre.expand), pre.mask.shape[1], pre.expand.device
        self.B, self.L, self.b, self.settings = B, L, B, settings
        self.keys = keys  # [B] int64 per-row sampling keys (trainer/rollout/keyed.py), or None: the stream
        self.cache = SlotCache(layer_kv(pre.cache), pre.expand, L + max_new)
        self.valid = torch.ones((B, L + max_new), dtype=torch.bool, device=dev)  # later slots: by window or slot
        self.valid[:, :L] = pre.mask.index_select(0, pre.expand).bool()
        self.last_pos = pre.pos[:, -1].index_select(0, pre.expand)
        self.slots = torch.arange(L + max_new, device=dev)
        self.row_of = torch.arange(B, device=dev)
        self.tok_in = torch.full((B,), settings.pad_id, dtype=torch.long, device=dev)
        self.tokens = torch.full((B, max_new), settings.pad_id, dtype=torch.long, device=dev)
        self.logprobs = torch.zeros((B, max_new), dtype=torch.float32, device=dev)
        self.lengths = torch.zeros(B, dtype=torch.long, device=dev)
        self.done = torch.zeros(B, dtype=torch.bool, device=dev)
        self.bad = torch.zeros((), dtype=torch.bool, device=dev)
        self.sizes = bucket_sizes(B, 1.0 - settings.compact_at, 8 if settings.graphs else 1)

    def record(self, t: int, tok: torch.Tensor, lp: torch.Tensor) -> None:
        """Step t's tokens and log-probs [b] of the forward batch: rows already finished get
        pad and 0 (as the dynamic decode), lengths and done move on, the tokens are fed next."""
        rows = self.row_of[:self.b]
        was_done = self.done.index_select(0, rows)
        tok, lp = tok.masked_fill(was_done, self.settings.pad_id), lp.masked_fill(was_done, 0.0)
        self.tokens[:, t].index_copy_(0, rows, tok)
        self.logprobs[:, t].index_copy_(0, rows, lp)
        self.lengths.index_add_(0, rows, (~was_done).long())
        self.done.index_copy_(0, rows, was_done | torch.isin(tok, self.settings.stop_ids))
        self.bad |= ~torch.isfinite(lp).all()
        self.tok_in[:self.b] = tok

    def live(self) -> int:
        """Rows still decoding: the one host read of a check. Raises, as torch.multinomial does,
        when a log-prob was not finite (the no-sync sampler does not check its probabilities)."""
        live, bad = torch.stack([(~self.done).sum(), self.bad.long()]).tolist()
        if bad:
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        return int(live)

    def shrink(self, live: int) -> bool:
        """Shrink the forward batch to the smallest size of the ladder that holds the ``live``
        rows (live rows first, in batch order). Returns whether it shrank."""
        new_b = pick_bucket(self.sizes, live)
        if new_b >= self.b:
            return False
        rows = self.row_of[:self.b]
        keep = torch.argsort(self.done.index_select(0, rows).to(torch.int8), stable=True)[:new_b]
        self.cache.compact(keep)
        for buf in (self.row_of, self.tok_in, self.last_pos, self.valid):
            buf[:new_b] = buf[:self.b].index_select(0, keep)
        self.b = new_b
        return True

    def outputs(self, steps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return (self.tokens[:, :steps].cpu(), self.logprobs[:, :steps].cpu(), self.lengths.cpu(), self.done.cpu())


def eager_step(model: torch.nn.Module, s: DecodeState, t: int, kind: str, dtype: torch.dtype) -> torch.Tensor:
    """Step t's forward (t >= 1) over the first ``b`` rows, attending to the slots written so
    far only (a key count of L + t, as the dynamic decode): logits [b, V]."""
    b, window = s.b, s.L + t
    s.cache.slot.fill_(window - 1)
    s.cache.rows, s.cache.window = b, window
    out = model(input_ids=s.tok_in[:b, None], attention_mask=as_4d(s.valid[:b, :window], kind, dtype),
                position_ids=(s.last_pos[:b] + t)[:, None], use_cache=True, **{s.settings.cache_kw: s.cache})
    return out.logits[:, -1]


def fixed_step(model: torch.nn.Module, s: DecodeState, b: int, kind: str, dtype: torch.dtype) -> torch.Tensor:
    """The decode step with shapes that depend on ``b`` only (what a CUDA graph captures): it
    attends over the whole capacity, slots past ``cache.slot`` masked, positions from the slot."""
    slot = s.cache.slot
    s.cache.rows, s.cache.window = b, s.slots.numel()
    keep = s.valid[:b] & (s.slots <= slot)
    pos = s.last_pos[:b] + (slot - (s.L - 1))
    out = model(input_ids=s.tok_in[:b, None], attention_mask=as_4d(keep, kind, dtype), position_ids=pos[:, None],
                use_cache=True, **{s.settings.cache_kw: s.cache})
    return out.logits[:, -1]


class Rewind:
    """Generator states before each step since the last host read, so steps decoded after the
    last row finished (a check every k steps overshoots) can be undone on the generator: the
    next call then draws what it would have drawn after the dynamic decode."""

    def __init__(self, generator: torch.Generator | None, enabled: bool):
        self.generator = generator if enabled else None
        self.states: dict[int, torch.Tensor] = {}

    def before(self, t: int) -> None:
        if self.generator is not None:
            self.states[t] = self.generator.get_state()

    def clear(self) -> None:
        self.states = {}

    def to(self, steps: int, ran: int) -> None:
        if self.generator is not None and steps < ran:
            self.generator.set_state(self.states[steps])


def resolve_generator(generator: torch.Generator | None, device: torch.device) -> torch.Generator:
    """The generator torch.multinomial would use: the given one, else the device's default."""
    if generator is not None:
        return generator
    if device.type == "cuda":
        return torch.cuda.default_generators[device.index if device.index is not None else torch.cuda.current_device()]
    return torch.default_generator


def step_function(model: torch.nn.Module, s: DecodeState) -> Callable[[int], torch.Tensor]:
    """step(t) -> logits [b, V] of decode step t >= 1. With ``graphs``: the fixed-shape step,
    replayed as CUDA graphs on CUDA and run eagerly elsewhere (so the CPU tests run the very
    arithmetic a graph captures); without: the eager step over the slots written so far."""
    kind = mask_kind(model)
    embed: Any = model.get_input_embeddings()  # type: ignore[operator]
    dtype = embed.weight.dtype  # the mask dtype transformers' eager path uses
    if not s.settings.graphs:
        return lambda t: eager_step(model, s, t, kind, dtype)

    def fixed(b: int) -> torch.Tensor:
        return fixed_step(model, s, b, kind, dtype)

    run: Callable[[int], torch.Tensor] = fixed
    if s.slots.device.type == "cuda":
        from trainer.rollout.decode_graphs import BucketGraphs

        run = BucketGraphs(fixed)

    def step(t: int) -> torch.Tensor:
        s.cache.slot.fill_(s.L + t - 1)
        return run(s.b)

    return step


def sample_step(s: DecodeState, logits: torch.Tensor, sampling: SamplingParams,
                gen: torch.Generator | None, t: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and log-probs [b] of the forward batch's rows from their logits [b, V]. The
    exponentials are drawn for all B rows in row order (torch.multinomial over B rows draws
    them so), each row then takes its own: the generator's stream never depends on the batch.
    A generator on another device than the model draws there (as multinomial does), which
    costs a copy of the probabilities, and with it a sync, every step. With per-row keys, each
    row draws from its own key at token ``t`` instead (no generator)."""
    if s.keys is not None:
        keys = s.keys.index_select(0, s.row_of[:s.b])
        return sample_keyed(logits, sampling, keys, torch.full_like(keys, t))
    if gen is None:
        return sample_with_draws(logits, sampling, None)
    draws = exponential_draws(s.B, logits.shape[-1], gen, logits.device)
    if s.b < s.B:
        draws = draws.index_select(0, s.row_of[:s.b].to(draws.device))
    return sample_with_draws(logits, sampling, draws)


def decode_static(model: torch.nn.Module, pre: Prefill, sampling: SamplingParams,
                  generator: torch.Generator | None, settings: StaticSettings, keys: torch.Tensor | None = None):
    """The static-shape sampling loop (module docstring). Returns, on the CPU, tokens [B, S'],
    log-probs [B, S'], lengths [B] and finished [B], S' <= max_new_tokens the steps the dynamic
    decode would take (the longest response)."""
    S = int(sampling.max_new_tokens)
    s = DecodeState(pre, S, settings, keys)
    logits = pre.logits.index_select(0, pre.expand)  # step 0 samples from the prefill
    pre.cache = None  # every row's copy is in the slot cache: let the distinct prompts' go
    step = step_function(model, s)
    gen = resolve_generator(generator, s.slots.device) if sampling.temperature > 0 and keys is None else None
    rewind, ran = Rewind(gen, settings.sync_every > 1), 0
    for t in range(S):
        if t > 0:
            logits = step(t)
        rewind.before(t)
        s.record(t, *sample_step(s, logits, sampling, gen, t))
        ran = t + 1
        if ran % settings.sync_every == 0 or ran == S:
            live = s.live()
            if live == 0:
                break
            s.shrink(live)
            rewind.clear()
    steps = int(s.lengths.max())
    rewind.to(steps, ran)
    return s.outputs(steps)
