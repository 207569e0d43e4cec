"""The hf sampler (``sampler="hf"``): batched KV-cache sampling with a transformers causal LM.

One ``generate`` call samples every row (sum of ``n_per_prompt``) in one batch:

1. expand prompts into rows (prompt-major, so outputs come back ordered by prompt then sample),
2. LEFT-pad, attention mask m, position ids ``clamp(cumsum(m) - 1, 0)`` (so a padded row gets
   the same positions as an unpadded one and the numbers match right-padded training),
3. prefill once per DISTINCT prompt with ``use_cache=True`` keeping only the last position's
   logits, then copy each prompt's KV cache to its rows (n samples share one prefill; the
   padding and the cache's names are trainer/rollout/kv_cache.py's, which the update shares),
4. decode one token per step for all rows from the KV cache.

Conventions (the open points, decided here):

* Log-probs are of the sampled token under the temperature-scaled softmax over the FULL
  vocabulary, ``log softmax(z / T)[y]``, i.e. WITHOUT top-p renormalisation. This is what
  vLLM returns as logprobs and what verl/TRL recompute as old log-probs, so the PPO ratio
  against ``trainer.embedded.forward.sequence_logprobs(model, batch, T)`` is exactly 1 at the
  sampling weights.
* ``temperature == 0`` means greedy (argmax); its log-probs are then recorded at T = 1.
* A row stops at EOS (EOS kept in ``response_ids`` with its log-prob) or at
  ``max_new_tokens``. A finished row is fed ``pad_id`` with attention mask 0 until a quarter
  of the batch has finished; then the forward batch is compacted to the live rows (one
  re-indexing of the KV cache, not one per step), so a call costs about its tokens, not its
  rows times its longest response. The loop exits as soon as every row has finished.
* Sampling draws only from ``generator`` (torch.multinomial), so the same generator state
  gives identical rollouts. A generator on another device than the model is honoured by
  sampling on the generator's device.
* The model is the training model itself (shared object): ``sync_weights`` only stores the
  reference, there is nothing to copy.

Two decodes behind the same ``generate`` (``decode=``): this module's dynamic loop (the default,
and the reference the others are tested against) and the slot-cache core of
trainer/rollout/static_decode.py (preallocated KV cache, finished rows masked, no host sync per
token, CUDA graphs on request), which also runs ``stream``'s continuous batch. Both sample with
the arithmetic of trainer/rollout/sampling.py, so the same generator gives them the same tokens.
"""

from __future__ import annotations

import contextlib
import numbers
from typing import Callable, Sequence

import torch

from trainer.rollout.kv_cache import forward_kwargs, left_pad, output_cache
from trainer.rollout.base import Rollout, SamplingParams
from trainer.rollout.continuous import Block, decode_stream
from trainer.rollout.keyed import check_finite, sample_keyed
from trainer.rollout.sampling import sample_next, top_p_filter
from trainer.rollout.static_decode import DECODES, Prefill, RowOut, StaticSettings, decode_static

__all__ = ["HFSampler", "expand_counts", "live_rows", "sample_next", "top_p_filter"]


def expand_counts(n_prompts: int, n_per_prompt: Sequence[int] | int) -> list[int]:
    """Normalise ``n_per_prompt`` (an int or one count per prompt, 0 allowed) to a list."""
    if isinstance(n_per_prompt, numbers.Integral):
        counts = [int(n_per_prompt)] * n_prompts
    else:
        counts = [int(n) for n in n_per_prompt]
    if len(counts) != n_prompts:
        raise ValueError(f"n_per_prompt has {len(counts)} entries for {n_prompts} prompts")
    if any(n < 0 for n in counts):
        raise ValueError(f"n_per_prompt must be >= 0, got {counts}")
    return counts


class HFSampler:
    """Batched KV-cache sampler over a shared transformers causal LM (see module docstring).

    device: where inputs go (default: the model's parameter device).
    dtype: torch.bfloat16/float16 enables autocast on CUDA; the model's own dtype is left
        alone (it is the training model). On CPU generation runs in the model's dtype (fp32).
    max_batch_rows: split calls with more rows into chunks of this many rows (memory);
        chunks run sequentially with the same generator, results are concatenated in order.
    compact_at: drop finished rows from the forward batch once this fraction of it has
        finished (default 0.25; > 1 keeps every row to the end). The sampled tokens do not
        depend on it (:meth:`_decode`). The static decode shrinks along a ladder of batch sizes
        spaced by 1 - compact_at instead.
    decode: "dynamic" (this module's loop), "static" (preallocated KV cache, finished rows
        masked, no host sync per token: trainer/rollout/static_decode.py) or "graphs" (static,
        each decode step replayed as a CUDA graph per batch size on CUDA; elsewhere the same
        fixed-shape step runs eagerly).
        The same generator gives the same tokens on all three.
    sync_every: the static decode's steps between host reads (stop, shrink); None: 1 on the
        CPU, where a read costs nothing, 8 on CUDA.
    """

    def __init__(self, model: torch.nn.Module, eos_id: int | Sequence[int], pad_id: int, device=None,
                 dtype: torch.dtype | None = None, max_batch_rows: int | None = None, compact_at: float = 0.25,
                 decode: str = "dynamic", sync_every: int | None = None):
        if max_batch_rows is not None and max_batch_rows < 1:
            raise ValueError(f"max_batch_rows must be >= 1, got {max_batch_rows}")
        if decode not in DECODES:
            raise ValueError(f"decode must be one of {DECODES}, got {decode!r}")
        if sync_every is not None and sync_every < 1:
            raise ValueError(f"sync_every must be >= 1, got {sync_every}")
        self.decode, self.sync_every = decode, sync_every
        # Several stop ids: chat models end a turn with a token (<|im_end|>) other than the
        # tokenizer's EOS; every id here ends a response and is kept as its last token.
        stop = [eos_id] if isinstance(eos_id, int) else list(eos_id)
        if not stop:
            raise ValueError("eos_id: give at least one stop token id")
        self.stop_ids = torch.tensor(sorted({int(i) for i in stop}), dtype=torch.long)
        self.eos_id, self.pad_id = int(stop[0]), int(pad_id)
        self.dtype, self.max_batch_rows, self.compact_at = dtype, max_batch_rows, float(compact_at)
        self._device = torch.device(device) if device is not None else None
        self.sync_weights(model)

    def sync_weights(self, model: torch.nn.Module) -> None:
        """The engine samples from the training model object itself, so new weights are
        visible immediately: this only (re)stores the reference."""
        self.model = model
        self._cache_kw, self._keep_kw = forward_kwargs(model)

    @property
    def device(self) -> torch.device:
        return self._device if self._device is not None else next(self.model.parameters()).device

    def generate(self, prompts: Sequence[list[int]], n_per_prompt: Sequence[int] | int,
                 sampling: SamplingParams, generator: torch.Generator | None = None,
                 keys: Sequence[int] | None = None) -> list[Rollout]:
        """Sample ``n_per_prompt[i]`` responses for each prompt i in one batched call.

        ``keys``: one int64 per row (prompt-major), to sample each row from its own key
        (trainer/rollout/keyed.py) instead of ``generator``'s stream.
        Returns rollouts ordered by prompt, then sample (``prompt_index`` set)."""
        counts = expand_counts(len(prompts), n_per_prompt)
        if keys is not None and len(keys) != sum(counts):
            raise ValueError(f"keys has {len(keys)} entries for {sum(counts)} rows")
        if any(len(prompts[i]) == 0 for i, n in enumerate(counts) if n > 0):
            raise ValueError("prompts must be non-empty (the first response token needs a context)")
        row_prompt = [i for i, n in enumerate(counts) for _ in range(n)]
        if not row_prompt:
            return []
        step = self.max_batch_rows or len(row_prompt)
        out: list[Rollout] = []
        with self._sampling_mode():
            for start in range(0, len(row_prompt), step):
                chunk_keys = None if keys is None else self._keys(keys[start:start + step])
                out += self._generate_rows(prompts, row_prompt[start:start + step], sampling, generator, chunk_keys)
        return out

    def stream(self, prompts: Sequence[list[int]], first: Sequence[Block], sampling: SamplingParams,
               react: Callable[[int, list[Rollout]], Sequence[Block]]) -> list[Rollout]:
        """Sample ``first`` and the blocks ``react`` asks for in one continuous batch
        (trainer/rollout/continuous.py); rows sample with their blocks' keys.

        ``react(block id, rollouts)`` gets each block's rollouts (``round`` set from the block) when
        its last row finishes, and returns the blocks to add (none: nothing more); ids count the
        non-empty blocks in the order they were asked for. The batch holds at most
        the first blocks' rows (or ``max_batch_rows``). Returns every rollout, in the order the
        blocks were asked for."""
        n_first = sum(len(b.keys) for b in first)
        if not n_first:
            return []
        if int(sampling.max_new_tokens) <= 0:
            raise ValueError("a continuous batch samples at least one token per row (max_new_tokens >= 1)")
        if any(not prompts[i] for i in range(len(prompts))):
            raise ValueError("prompts must be non-empty (the first response token needs a context)")
        built: dict[int, list[Rollout]] = {}

        def on_block(bid: int, blk: Block, rows: list[RowOut]) -> Sequence[Block]:
            built[bid] = [Rollout(prompt_index=blk.prompt, prompt_ids=list(prompts[blk.prompt]), response_ids=r.tokens,
                                  logprobs=r.logprobs, finished=r.finished, round=blk.round) for r in rows]
            return react(bid, built[bid])

        capacity = min(n_first, self.max_batch_rows or n_first)
        with self._sampling_mode():
            pre = self._prefill_distinct(prompts, list(range(len(prompts))))
            decode_stream(self.model, pre, first, on_block, sampling, self._static_settings(), capacity)
        return [r for bid in sorted(built) for r in built[bid]]

    @contextlib.contextmanager
    def _sampling_mode(self):
        """Eval mode (each submodule's own mode restored after), inference mode and autocast."""
        modes = [m.training for m in self.model.modules()] if self.model.training else None
        if modes is not None:  # toggling walks every module: skip it when already in eval mode
            self.model.eval()
        try:
            with torch.inference_mode(), self._autocast():
                yield
        finally:
            if modes is not None:  # restore each submodule's own mode (some may be frozen in eval)
                for m, mode in zip(self.model.modules(), modes):
                    m.training = mode

    def _autocast(self):
        dev = self.device
        if dev.type == "cuda" and self.dtype in (torch.bfloat16, torch.float16):
            return torch.autocast("cuda", dtype=self.dtype)
        return contextlib.nullcontext()

    def _keys(self, keys: Sequence[int]) -> torch.Tensor:
        return torch.tensor(list(keys), dtype=torch.int64, device=self.device)

    def _generate_rows(self, prompts, row_prompt: list[int], sampling: SamplingParams,
                       generator, keys: torch.Tensor | None = None) -> list[Rollout]:
        """Prefill + decode for one chunk of rows (row r samples prompt ``row_prompt[r]``)."""
        if self.decode == "dynamic" or int(sampling.max_new_tokens) <= 0:
            out = [x.tolist() for x in self._decode(prompts, row_prompt, sampling, generator, keys)]
            rows = [RowOut(t[:n], lp[:n], bool(f)) for t, lp, n, f in zip(*out)]
        else:
            rows = decode_static(self.model, self._prefill_distinct(prompts, row_prompt), sampling, generator,
                                 self._static_settings(), keys)
        return [Rollout(prompt_index=p, prompt_ids=list(prompts[p]), response_ids=r.tokens, logprobs=r.logprobs,
                        finished=r.finished) for p, r in zip(row_prompt, rows)]

    def _static_settings(self) -> StaticSettings:
        dev = self.device
        sync = self.sync_every if self.sync_every is not None else (8 if dev.type == "cuda" else 1)
        return StaticSettings(pad_id=self.pad_id, stop_ids=self.stop_ids.to(dev), cache_kw=self._cache_kw,
                              compact_at=self.compact_at, sync_every=sync, graphs=self.decode == "graphs")

    def _prefill_distinct(self, prompts, row_prompt: list[int]) -> Prefill:
        """Run each distinct prompt once: rows that share a prompt (n samples per prompt) would
        recompute identical keys and values, so the prefill costs (distinct prompts) instead of
        (rows). ``expand`` maps each row to its prompt's slot."""
        uniq = sorted(set(row_prompt))
        ids, mask, pos = left_pad([list(prompts[i]) for i in uniq], self.pad_id, self.device)
        kw = {self._keep_kw: 1} if self._keep_kw else {}
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **kw)
        slot = {p: u for u, p in enumerate(uniq)}
        expand = torch.tensor([slot[p] for p in row_prompt], dtype=torch.long, device=ids.device)
        return Prefill(logits=out.logits[:, -1], cache=output_cache(out), mask=mask, pos=pos, expand=expand)

    def _prefill(self, prompts, row_prompt: list[int]):
        """The distinct prompts' prefill copied to their rows (``Cache.reorder_cache``: an
        index_select on the batch dim). Returns the last-position logits [B, V], the cache, the
        attention mask [B, L] and position ids [B, L]."""
        pre = self._prefill_distinct(prompts, row_prompt)
        logits, cache, mask, pos = pre.logits, pre.cache, pre.mask, pre.pos
        if len(pre.logits) != len(row_prompt):
            cache.reorder_cache(pre.expand)
            logits, mask, pos = logits[pre.expand], mask[pre.expand], pos[pre.expand]
        return logits, cache, mask, pos

    def _decode(self, prompts, row_prompt: list[int], sampling: SamplingParams, generator,
                keys: torch.Tensor | None = None):
        """The vectorised sampling loop. Returns tokens [B, S], logprobs [B, S], lengths [B],
        finished [B] (on CPU), S <= max_new_tokens the number of decode steps taken.

        The forward runs on the live rows only: when a quarter of the batch has finished, the
        cache, mask and positions are compacted to the rows still decoding (see
        :func:`live_rows`). Sampling still draws for all B rows, so the generator's stream, and
        with it every sampled token, is the same as with no compaction."""
        dev, B, S = self.device, len(row_prompt), int(sampling.max_new_tokens)
        if S <= 0:
            empty = torch.zeros((B, 0))
            return empty.long(), empty, torch.zeros(B, dtype=torch.long), torch.zeros(B, dtype=torch.bool)
        logits, cache, mask, pos = self._prefill(prompts, row_prompt)
        L = mask.shape[1]
        full_mask = torch.cat([mask, torch.zeros((B, S), dtype=mask.dtype, device=dev)], dim=1)
        tokens = torch.full((B, S), self.pad_id, dtype=torch.long, device=dev)
        logprobs = torch.zeros((B, S), dtype=torch.float32, device=dev)
        done = torch.zeros(B, dtype=torch.bool, device=dev)
        stop_ids = self.stop_ids.to(dev)
        lengths = torch.zeros(B, dtype=torch.long, device=dev)
        pos = pos[:, -1:] + 1
        live = torch.arange(B, device=dev)  # the rows in the forward batch, in batch order
        all_logits = logits
        steps = 0
        for t in range(S):
            if t > 0:
                keep = live_rows(done, live, self.compact_at)
                if keep is not None:  # drop finished rows from the forward batch
                    cache.reorder_cache(keep)
                    live, full_mask, pos, tok = live[keep], full_mask[keep], pos[keep], tok[keep]  # noqa: F821
                full_mask[:, L + t - 1] = (~done[live]).long()  # the token fed now; finished rows are masked out
                out = self.model(input_ids=tok[:, None], attention_mask=full_mask[:, :L + t],  # noqa: F821 (tok: step t-1's)
                                 position_ids=pos, use_cache=True, **{self._cache_kw: cache})
                cache, logits = output_cache(out), out.logits[:, -1]
                pos = pos + 1
                # finished rows keep their last logits: they are sampled and masked, so the
                # generator draws exactly as many numbers per step as with every row in the batch
                if len(live) == B:
                    all_logits = logits
                else:
                    all_logits.index_copy_(0, live, logits.to(all_logits.dtype))
            if keys is None:
                tok_all, lp = sample_next(all_logits, sampling, generator)
            else:
                tok_all, lp = sample_keyed(all_logits, sampling, keys, torch.full_like(keys, t))
                check_finite(lp)  # multinomial's own check (this loop reads the host every step anyway)
            tok_all = tok_all.masked_fill(done, self.pad_id)
            tokens[:, t], logprobs[:, t] = tok_all, lp.masked_fill(done, 0.0)
            lengths += (~done).long()
            done = done | torch.isin(tok_all, stop_ids)
            tok = tok_all[live]
            steps = t + 1
            if bool(done.all()):
                break
        return tokens[:, :steps].cpu(), logprobs[:, :steps].cpu(), lengths.cpu(), done.cpu()


def live_rows(done: torch.Tensor, live: torch.Tensor, compact_at: float) -> torch.Tensor | None:
    """Positions (in the current forward batch ``live``) of the rows still decoding, when at
    least ``compact_at`` of that batch has finished; else None (keep the batch as it is).

    Why compact: a call decodes until its longest row stops, and on short-answer tasks most
    rows stop early (the tiny task: mean 3.8 tokens, max 5-12), so a forward over every row
    spends 25-70% of its rows on finished ones. Compacting costs one index_select of the KV
    cache, so it waits until enough rows have finished to pay for it (``compact_at`` > 1
    never compacts)."""
    finished = done[live]
    n_done = int(finished.sum())
    if n_done == 0 or n_done < compact_at * len(live) or n_done == len(live):
        return None
    return (~finished).nonzero()[:, 0]
