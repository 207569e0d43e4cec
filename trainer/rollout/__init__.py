"""Samplers (what generates a run's rollouts: the config's ``sampler``), registered with what they
can do in trainer/spec/sampler_registry.py (``SamplerSpec.build`` names the builders below); heavy
backends import lazily. Every sampler is built from the same keywords
(:class:`~trainer.rollout.base.SamplerArgs`):

    sampler = make_sampler("hf", model=model, stop_ids=[tok.eos_id], pad_id=tok.pad_id)
    rollouts = sampler.generate(prompts, n_per_prompt, SamplingParams(...), generator)
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from common.refs import load
from trainer.rollout.base import Rollout, RolloutSampler, SamplerArgs, SamplingParams
from trainer.spec.sampler_registry import get_sampler


def build_hf(a: SamplerArgs) -> RolloutSampler:
    """transformers' KV-cache sampling from the training model itself (trainer/rollout/embedded.py)."""
    from trainer.rollout.embedded import HFSampler

    if a.model is None:
        raise ValueError("the hf sampler samples from a model: pass model=")
    return HFSampler(a.model, eos_id=list(a.stop_ids), pad_id=a.pad_id, device=a.device, dtype=a.dtype,
                     decode=a.decode)


def build_vllm(a: SamplerArgs) -> RolloutSampler:
    """vLLM (optional extra, CUDA): ImportError with the install hint when vLLM is missing."""
    from trainer.rollout.vllm import VLLMEngine, import_vllm

    import_vllm()  # the install hint first, whatever the arguments
    if a.model_path is None:
        raise ValueError("the vllm sampler loads the policy from a directory: pass model_path=")
    return VLLMEngine(a.model_path, eos_ids=a.stop_ids, pad_id=a.pad_id, seed=a.seed, max_model_len=a.max_model_len,
                      dtype="bfloat16" if a.dtype == torch.bfloat16 else "float32")


def make_sampler(name: str, *, stop_ids: Sequence[int], pad_id: int, model: torch.nn.Module | None = None,
                 model_path: str | Path | None = None, device: torch.device | None = None,
                 dtype: torch.dtype | None = None, seed: int = 0, max_model_len: int | None = None,
                 decode: str = "dynamic") -> RolloutSampler:
    """Build the sampler registered as ``name`` (trainer/spec/sampler_registry.py); the keywords are the
    same for every sampler (:class:`SamplerArgs`)."""
    build = load(get_sampler(name).build)
    return build(SamplerArgs(stop_ids=stop_ids, pad_id=pad_id, model=model, model_path=model_path, device=device,
                             dtype=dtype, seed=seed, max_model_len=max_model_len, decode=decode))


__all__ = ["Rollout", "RolloutSampler", "SamplerArgs", "SamplingParams", "build_hf", "build_vllm", "make_sampler"]
