"""Token sampling shared by the embedded sampler's two decodes (trainer/rollout/embedded.py and
trainer/rollout/static_decode.py): nucleus filtering, and a sampler that never syncs the host.

Conventions (the embedded engine's module docstring has the why): log-probs are of the sampled
token under the temperature-scaled softmax over the FULL vocabulary, ``log softmax(z / T)[y]``,
without top-p renormalisation; ``temperature == 0`` is greedy with log-probs at T = 1.

Why a second sampler: ``torch.multinomial(p, 1)`` is ``argmax(p / q)`` with ``q ~ Exp(1)`` drawn as
``empty_like(p).exponential_(generator)`` (ATen's fast path for one sample), but before drawing it
checks ``p`` with two ``.item()`` calls, i.e. two host syncs per decode step on CUDA, and a CUDA
graph cannot contain them. :func:`exponential_draws` + :func:`sample_with_draws` do the same
arithmetic on the same draws without the checks, so they give the same tokens from the same
generator (tests/trainer/rollout/test_static_decode.py holds them to it), and the draws of all
B rows can be taken while only some rows are computed (compaction keeps the generator's stream).
"""

from __future__ import annotations

import torch

from trainer.rollout.base import SamplingParams


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filter on probabilities [B, V]: keep the smallest prefix (by descending
    probability) whose mass reaches ``top_p``; always keeps the most likely token.
    Returns unnormalised kept probabilities (multinomial normalises)."""
    if top_p >= 1.0:
        return probs
    sorted_p, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_p.cumsum(-1) - sorted_p  # mass strictly before each token
    sorted_p = sorted_p.masked_fill(mass_before >= top_p, 0.0)
    sorted_p[:, 0] = torch.where(sorted_p[:, 0] > 0, sorted_p[:, 0], 1.0)  # at least one token
    return torch.zeros_like(probs).scatter_(-1, order, sorted_p)


def scaled(logits: torch.Tensor, sampling: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
    """(z, logsumexp(z)) with z = logits / T in float32 (T = 1 for greedy): what every token's
    log-prob is taken from."""
    temperature = sampling.temperature if sampling.temperature > 0 else 1.0
    z = logits.float() / temperature
    return z, torch.logsumexp(z, dim=-1, keepdim=True)


def sample_next(logits: torch.Tensor, sampling: SamplingParams,
                generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row from last-position logits [B, V] with ``torch.multinomial``.

    Returns (tokens [B] long, logprobs [B] float32) with
    logprob = z_y - logsumexp(z), z = logits / T (no top-p renormalisation). A generator on
    another device than the logits draws on its own device."""
    z, lse = scaled(logits, sampling)
    if sampling.temperature <= 0:
        tokens = z.argmax(dim=-1)
    else:
        probs = top_p_filter((z - lse).exp(), sampling.top_p)
        if generator is not None and generator.device != probs.device:
            tokens = torch.multinomial(probs.to(generator.device), 1, generator=generator).to(probs.device)[:, 0]
        else:
            tokens = torch.multinomial(probs, 1, generator=generator)[:, 0]
    logprobs = (z.gather(-1, tokens[:, None]) - lse)[:, 0]
    return tokens, logprobs


def exponential_draws(rows: int, vocab: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """q ~ Exp(1) [rows, vocab] float32, drawn exactly as ``torch.multinomial`` draws them for a
    [rows, vocab] float32 probability tensor: on the generator's device (``device`` without one)."""
    where = generator.device if generator is not None else device
    return torch.empty((rows, vocab), dtype=torch.float32, device=where).exponential_(1.0, generator=generator)


def sample_with_draws(logits: torch.Tensor, sampling: SamplingParams,
                      draws: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`sample_next` for rows whose exponential draws [b, V] are given (None when greedy):
    token = argmax(p / q), the arithmetic of ``torch.multinomial(p, 1)``, with no host sync.
    The division runs where the draws are, as multinomial runs on the generator's device."""
    z, lse = scaled(logits, sampling)
    if sampling.temperature <= 0 or draws is None:
        tokens = z.argmax(dim=-1)
    else:
        probs = top_p_filter((z - lse).exp(), sampling.top_p)
        tokens = (probs.to(draws.device) / draws).argmax(dim=-1).to(probs.device)
    logprobs = (z.gather(-1, tokens[:, None]) - lse)[:, 0]
    return tokens, logprobs
