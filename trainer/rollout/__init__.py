"""Samplers (what generates a run's rollouts: the config's ``sampler``), selected by name from a
plain dict; heavy backends import lazily. Every sampler is built from the same keywords
(:class:`~trainer.rollout.base.SamplerArgs`):

    sampler = make_sampler("hf", model=model, stop_ids=[tok.eos_id], pad_id=tok.pad_id)
    rollouts = sampler.generate(prompts, n_per_prompt, SamplingParams(...), generator)
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import torch

from trainer.rollout.base import Rollout, RolloutSampler, SamplerArgs, SamplingParams


def _hf(a: SamplerArgs) -> RolloutSampler:
    """transformers' KV-cache sampling from the training model itself (trainer/rollout/embedded.py)."""
    from trainer.rollout.embedded import EmbeddedEngine

    if a.model is None:
        raise ValueError("the hf sampler samples from a model: pass model=")
    return EmbeddedEngine(a.model, eos_id=list(a.stop_ids), pad_id=a.pad_id, device=a.device, dtype=a.dtype,
                          decode=a.decode)


def _vllm(a: SamplerArgs) -> RolloutSampler:
    """vLLM (optional extra, CUDA): ImportError with the install hint when vLLM is missing."""
    from trainer.rollout.vllm import VLLMEngine, import_vllm

    import_vllm()  # the install hint first, whatever the arguments
    if a.model_path is None:
        raise ValueError("the vllm sampler loads the policy from a directory: pass model_path=")
    return VLLMEngine(a.model_path, eos_ids=a.stop_ids, pad_id=a.pad_id, seed=a.seed, max_model_len=a.max_model_len,
                      dtype="bfloat16" if a.dtype == torch.bfloat16 else "float32")


# keyed by the config's sampler values (trainer/config.py ``SamplerName``)
SAMPLERS: dict[str, Callable[[SamplerArgs], RolloutSampler]] = {"hf": _hf, "vllm": _vllm}


def make_sampler(name: str, *, stop_ids: Sequence[int], pad_id: int, model: torch.nn.Module | None = None,
                 model_path: str | Path | None = None, device: torch.device | None = None,
                 dtype: torch.dtype | None = None, seed: int = 0, max_model_len: int | None = None,
                 decode: str = "dynamic") -> RolloutSampler:
    """Build the sampler registered as ``name``; the keywords are the same for every sampler
    (:class:`SamplerArgs`)."""
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}; choose one of {sorted(SAMPLERS)}")
    return SAMPLERS[name](SamplerArgs(stop_ids=stop_ids, pad_id=pad_id, model=model, model_path=model_path,
                                      device=device, dtype=dtype, seed=seed, max_model_len=max_model_len,
                                      decode=decode))


__all__ = ["SAMPLERS", "Rollout", "RolloutSampler", "SamplerArgs", "SamplingParams", "make_sampler"]
