"""Per-row sampling (``rollout.rng="per-row"``): each rollout draws its tokens from counter-based
random numbers keyed by the rollout, not from one generator stream shared by the batch.

Why: with the stream (``torch.multinomial``), the draws of a row depend on how many rows were
sampled before it and alongside it, so a row's tokens change with the batch around it. A
continuous batch (trainer/rollout/continuous.py) admits rows while others are mid-answer, so no
two schedules draw the stream in the same order. Keyed draws make a rollout's tokens a function of
the policy, its prompt and its key only, whatever batch, chunk or schedule computes it.

Token n of the row with key K takes one uniform ``u`` (53 bits of ``splitmix64(K, n)``) and returns
the token where the row's cumulative (top-p filtered, temperature-scaled) probabilities pass
``u * total``: inverse-CDF sampling, exact in distribution to float32's resolution, with one
random number per token instead of one per vocabulary entry. Log-probs follow
trainer/rollout/sampling.py's conventions.
"""

from __future__ import annotations

import torch

from trainer.rollout.base import SamplingParams
from trainer.rollout.sampling import scaled, top_p_filter

_GOLDEN = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_MASK64 = (1 << 64) - 1


def _signed(c: int) -> int:
    """A uint64 constant as the int64 with the same bits (torch has no uint64 arithmetic)."""
    return c - (1 << 64) if c >= 1 << 63 else c


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's >> is arithmetic on signed integers)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def splitmix64(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's output function on int64 tensors, wrapping as uint64 does (int64 products wrap
    in two's complement on every torch backend)."""
    z = x + _signed(_GOLDEN)
    z = (z ^ _shr(z, 30)) * _signed(_M1)
    z = (z ^ _shr(z, 27)) * _signed(_M2)
    return z ^ _shr(z, 31)


def splitmix64_ref(x: int) -> int:
    """The same function on Python ints (the tests' reference)."""
    z = (x + _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * _M1) & _MASK64
    z = ((z ^ (z >> 27)) * _M2) & _MASK64
    return z ^ (z >> 31)


def row_key(step_key: int, prompt: int, index: int) -> int:
    """The key (an int64) of rollout ``index`` of prompt ``prompt`` in a step keyed ``step_key``:
    every part goes through the mixer, so nearby prompts and indices get unrelated streams."""
    k = splitmix64_ref(step_key & _MASK64)
    k = splitmix64_ref(k ^ (prompt & _MASK64))
    k = splitmix64_ref(k ^ (index & _MASK64))
    return _signed(k)


def keyed_uniform(keys: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """u in [0, 1) float64 [b] for token ``n`` [b] of the rows keyed ``keys`` [b] (53 random bits)."""
    z = splitmix64(splitmix64(keys) ^ n.to(torch.int64))
    return _shr(z, 11).to(torch.float64) * 2.0 ** -53


def pick(probs: torch.Tensor, cdf: torch.Tensor, x: torch.Tensor, sequential: bool | None = None) -> torch.Tensor:
    """The token [b] whose cumulative probability first passes ``x`` [b, 1], never one of
    probability 0. On the CPU the cumulative sum is sequential, so it is flat across zeros and the
    search never lands on one. On CUDA it is a tree scan: across a run of zeros (top-p's filtered
    tokens) it may rise or fall by a rounding step, so the search can land on a zero; such a row
    takes the last token of positive probability before it (or its most likely one).
    ``sequential``: whether ``cdf`` was summed in order (default: it was on the CPU)."""
    V = probs.shape[-1]
    found = torch.searchsorted(cdf, x, right=True)[:, 0].clamp_(max=V - 1)
    if probs.device.type == "cpu" if sequential is None else sequential:  # a zero adds exactly nothing
        return found
    positive = probs > 0
    ar = torch.arange(V, device=probs.device, dtype=torch.float32)  # exact below 2**24 ids
    back = (positive & (ar <= found[:, None])).float().mul_(ar).amax(-1).long()
    back = torch.where(positive.gather(-1, back[:, None])[:, 0], back, probs.argmax(-1))
    return torch.where(positive.gather(-1, found[:, None])[:, 0], found, back)


def sample_keyed(logits: torch.Tensor, sampling: SamplingParams, keys: torch.Tensor | None,
                 n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and log-probs [b] of rows with logits [b, V], keys [b] and token positions n [b]
    (module docstring). Greedy (temperature 0, or ``keys`` None) takes the argmax. No host sync:
    non-finite logits give a non-finite log-prob, which the decodes check when they read the host."""
    z, lse = scaled(logits, sampling)
    if sampling.temperature <= 0 or keys is None:
        tokens = z.argmax(dim=-1)
    else:
        probs = top_p_filter((z - lse).exp(), sampling.top_p)
        cdf = probs.cumsum(-1)
        total = cdf[:, -1:]
        # u * total < total, kept so in float32
        x = (keyed_uniform(keys, n)[:, None] * total.double()).float()
        x = torch.minimum(x, torch.nextafter(total, torch.zeros_like(total)))
        tokens = pick(probs, cdf, x)
    logprobs = (z.gather(-1, tokens[:, None]) - lse)[:, 0]
    return tokens, logprobs


def check_finite(logprobs: torch.Tensor) -> None:
    """Raise as torch.multinomial does when a probability was not finite (one host read)."""
    if not bool(torch.isfinite(logprobs).all()):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
