"""Rollout engines, selected by name from a plain dict; heavy backends import lazily. Every
engine is built from the same keywords (:class:`~trainer.rollout.base.EngineArgs`):

    engine = make_engine("embedded", model=model, stop_ids=[tok.eos_id], pad_id=tok.pad_id)
    rollouts = engine.generate(prompts, n_per_prompt, SamplingParams(...), generator)
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import torch

from trainer.rollout.base import EngineArgs, Rollout, RolloutEngine, SamplingParams


def _embedded(a: EngineArgs) -> RolloutEngine:
    from trainer.rollout.embedded import EmbeddedEngine

    if a.model is None:
        raise ValueError("the embedded engine samples from a model: pass model=")
    return EmbeddedEngine(a.model, eos_id=list(a.stop_ids), pad_id=a.pad_id, device=a.device, dtype=a.dtype,
                          decode=a.decode)


def _vllm(a: EngineArgs) -> RolloutEngine:
    """vLLM (optional extra, CUDA): ImportError with the install hint when vLLM is missing."""
    from trainer.rollout.vllm import VLLMEngine, import_vllm

    import_vllm()  # the install hint first, whatever the arguments
    if a.model_path is None:
        raise ValueError("the vllm engine loads the policy from a directory: pass model_path=")
    return VLLMEngine(a.model_path, eos_ids=a.stop_ids, pad_id=a.pad_id, seed=a.seed, max_model_len=a.max_model_len,
                      dtype="bfloat16" if a.dtype == torch.bfloat16 else "float32")


ENGINES: dict[str, Callable[[EngineArgs], RolloutEngine]] = {"embedded": _embedded, "vllm": _vllm}


def make_engine(name: str, *, stop_ids: Sequence[int], pad_id: int, model: torch.nn.Module | None = None,
                model_path: str | Path | None = None, device: torch.device | None = None,
                dtype: torch.dtype | None = None, seed: int = 0, max_model_len: int | None = None,
                decode: str = "dynamic") -> RolloutEngine:
    """Build the rollout engine registered as ``name``; the keywords are the same for every
    engine (:class:`EngineArgs`)."""
    if name not in ENGINES:
        raise ValueError(f"unknown rollout engine {name!r}; choose one of {sorted(ENGINES)}")
    return ENGINES[name](EngineArgs(stop_ids=stop_ids, pad_id=pad_id, model=model, model_path=model_path,
                                    device=device, dtype=dtype, seed=seed, max_model_len=max_model_len,
                                    decode=decode))


__all__ = ["ENGINES", "EngineArgs", "Rollout", "RolloutEngine", "SamplingParams", "make_engine"]
