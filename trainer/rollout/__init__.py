"""Rollout engines, selected by name from a plain dict; heavy backends import lazily.

    engine = make_engine("embedded", model=model, eos_id=tok.eos_id, pad_id=tok.pad_id)
    rollouts = engine.generate(prompts, n_per_prompt, SamplingParams(...), generator)
"""

from __future__ import annotations

from typing import Callable

from trainer.rollout.base import Rollout, RolloutEngine, SamplingParams


def _embedded(**kw) -> RolloutEngine:
    from trainer.rollout.embedded import EmbeddedEngine

    return EmbeddedEngine(**kw)


def _vllm(**kw) -> RolloutEngine:
    """vLLM (optional extra, CUDA): ImportError with the install hint when vLLM is missing."""
    from trainer.rollout.vllm import VLLMEngine, import_vllm

    import_vllm()  # the install hint first, whatever the arguments
    return VLLMEngine(**kw)


ENGINES: dict[str, Callable[..., RolloutEngine]] = {"embedded": _embedded, "vllm": _vllm}


def make_engine(name: str, **kw) -> RolloutEngine:
    """Build the rollout engine registered as ``name`` with keyword arguments ``kw``."""
    if name not in ENGINES:
        raise ValueError(f"unknown rollout engine {name!r}; choose one of {sorted(ENGINES)}")
    return ENGINES[name](**kw)


__all__ = ["ENGINES", "Rollout", "RolloutEngine", "SamplingParams", "make_engine"]
