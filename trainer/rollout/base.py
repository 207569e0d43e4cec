"""The sampler protocol (what generates rollouts): generate with a per-prompt sample count.

AERO needs a different number of samples per prompt in every rescue round, so the protocol
takes ``n_per_prompt`` as a list (one count per prompt, 0 allowed) rather than a single n.
Samplers (the config's ``sampler``): ``hf`` (transformers + KV-cache sampling, CPU/CUDA) and
``vllm`` (optional).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Sequence

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 12


@dataclass
class Rollout:
    """One sampled response. Token lists, not padded tensors: groups are variable-size and
    are re-batched for training by ``trainer.embedded.forward.collate``."""

    prompt_index: int  # index into the ``prompts`` list given to ``generate``
    prompt_ids: list[int]
    response_ids: list[int]  # generated tokens, EOS included when it was sampled
    logprobs: list[float]  # behaviour-policy log-prob of each response token (at the sampling temperature)
    finished: bool  # True if EOS was sampled; False if cut at max_new_tokens
    round: int = 0  # generation round within the step (0 = first call)
    reward: float = 0.0
    meta: dict = field(default_factory=dict)
    version: int = 0  # the policy version (training steps done) that sampled it: ``logprobs`` are that policy's
    # log-probs under the policy the update starts from, when that is a newer one (asynchronous
    # training with a correction, trainer/core/importance.py); None: the behaviour policy is it
    proximal_logprobs: list[float] | None = None

    @property
    def length(self) -> int:
        return len(self.response_ids)


@dataclass(frozen=True)
class SamplerArgs:
    """What every sampler is built from: ``make_sampler(name, **fields)`` takes these keywords for
    every sampler, and each uses what it needs. The hf sampler samples from ``model``
    itself (``dtype`` bf16/fp16 autocasts on CUDA); vLLM loads ``model_path`` (``dtype``
    picks its weights' dtype) and is given ``model``'s weights after every update."""

    stop_ids: Sequence[int]  # every token id that ends a response (kept as its last token)
    pad_id: int
    model: torch.nn.Module | None = None
    model_path: str | Path | None = None
    device: torch.device | None = None  # default: the model's parameter device (vLLM: CUDA)
    dtype: torch.dtype | None = None
    seed: int = 0
    max_model_len: int | None = None  # prompt + response cap (vLLM's KV-cache sizing)
    decode: str = "dynamic"  # the hf sampler's decode (trainer/rollout/embedded.py); vLLM has its own


class RolloutSampler(Protocol):
    """What the loop and the evaluation call on a sampler (registered in trainer/spec/sampler_registry.py)."""

    device: torch.device  # where generation runs: the evaluation seeds its own generator there

    def generate(
        self,
        prompts: Sequence[list[int]],
        n_per_prompt: Sequence[int] | int,
        sampling: SamplingParams,
        generator: torch.Generator | None = None,
    ) -> list[Rollout]:
        """Sample ``n_per_prompt[i]`` responses for prompt i, all in one batched call.

        Returns rollouts ordered by prompt, then by sample index within the prompt."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the sampler sample from ``model``'s current weights (no-op when shared)."""
        ...
