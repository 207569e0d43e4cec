"""An HF-generate rollout for verl 0.9.1 (``rollout.name=aero_hf``): a Ray server actor that
samples with the platform's batched KV-cache sampler (trainer/rollout/embedded.py) over a
transformers model, behind verl's token-in/token-out server interface, with real weight sync.

verl's hybrid engine rolls out through *servers* (vLLM, SGLang, TRT-LLM): every agent-loop
worker sends one ``generate(prompt_ids, sampling_params)`` request per sample to a server actor
and the trainer syncs the actor's weights into that server between steps. This module is a
fourth server:

    HFReplica        the RolloutReplica: starts one HFRolloutServer per replica (``num_cpus=0``,
                     beside the hybrid workers it belongs to; on CUDA, on their GPUs)
    HFRolloutServer  the Ray actor. Requests that arrive together are batched: a request waits
                     until no new one has arrived for ``BATCH_WINDOW_S`` (or ``max_num_seqs`` are
                     waiting), then every waiting request with the same sampling settings is
                     sampled in ONE batched call (one prefill per distinct prompt, KV-cache
                     decode), so a verl generate call of B rows costs about one batched
                     generation, not B. ``calls`` counts those batched calls.
    HFServerAdapter  the hybrid worker's side (BaseRollout): ``update_weights`` receives the
                     FSDP engine's full tensors (HF names) and the replica's first rank ships
                     them to its server, which loads them into its model.

The server starts from random weights when ``rollout.load_format`` is "dummy" (verl's default,
as for vLLM): the trainer's first weight sync gives it the policy, so a broken sync shows at
once as garbage samples. Sampling: temperature, top_p, greedy (temperature 0); top_k and
repetition penalties are refused (the platform never sets them). Log-probs are of the sampled
token under the temperature-scaled full softmax (the embedded sampler's convention, which is
vLLM's "processed_logprobs").

Reproducible: with ``rollout.full_determinism`` (on for this server, trainer/verl/overrides.py)
verl's agent loop names each request ``det-<its sample index in the generate call>`` and routes
an id to the same replica every time. Each such request samples from its own key (trainer/
rollout/keyed.py: counter-based draws), made of the rollout seed, the global step, the index and
how many times this step served that id, so its tokens depend on neither the order requests
arrive in, nor the batch they land in, nor the data-parallel size: two runs of one seed sample
the same tokens. Requests are still batched (one prefill per distinct prompt, one decode). A
request without such an id (another agent loop) draws from the replica's stream.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout

from trainer.verl.model_dir import stop_ids
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

logger = logging.getLogger(__name__)

BATCH_WINDOW_S = 0.02  # a batch closes after this long without a new request


@dataclass
class _Request:
    prompt_ids: list[int]
    key: tuple  # the sampling settings, and whether the request has a row key: one batch per key
    future: asyncio.Future
    row_key: int | None = None  # its keyed draws (module docstring), or None: the replica's stream
    arrived: float = field(default_factory=time.perf_counter)


DET_PREFIX = "det-"  # verl's request ids under rollout.full_determinism


def request_key(seed: int, step: int, request_id: str, nth: int) -> int | None:
    """The sampling key of a ``det-<index>`` request served for the ``nth`` time in ``step``, or None
    for any other id: trainer/rollout/keyed.py's row key of (seed and step, index, nth)."""
    from trainer.rollout.keyed import row_key, splitmix64_ref

    index = str(request_id).removeprefix(DET_PREFIX)
    if not str(request_id).startswith(DET_PREFIX) or not index.isdigit():
        return None
    return row_key(splitmix64_ref((int(seed) * 1_000_003 + int(step)) & ((1 << 64) - 1)), int(index), nth)


def _sampling_key(params: dict[str, Any], response_length: int, prompt_len: int, max_model_len: int | None) -> tuple:
    """(temperature, top_p, max_new_tokens, logprobs) of one request; refuses what the sampler
    cannot honour."""
    top_k = int(params.get("top_k", -1) or -1)
    if top_k > 0:
        raise ValueError(f"the aero_hf rollout does not support top_k={top_k}; use top_p")
    if float(params.get("repetition_penalty", 1.0) or 1.0) != 1.0:
        raise ValueError("the aero_hf rollout does not support repetition_penalty")
    max_new = int(params.get("max_tokens") or params.get("max_new_tokens") or response_length)
    if max_model_len:
        max_new = min(max_new, int(max_model_len) - prompt_len)
    if max_new < 1:
        raise ValueError(f"prompt of {prompt_len} tokens leaves no room to generate within max_model_len {max_model_len}")
    return (float(params.get("temperature", 1.0)), float(params.get("top_p", 1.0)), max_new,
            bool(params.get("logprobs", False)))


class HFRolloutServer:
    """One replica's generation server (module docstring). Constructed by :class:`HFReplica`
    with the keyword arguments verl gives its vLLM server."""

    def __init__(self, config, model_config, rollout_mode=None, workers=None, replica_rank: int = 0,
                 node_rank: int = 0, gpus_per_node: int = 1, nnodes: int = 1, cuda_visible_devices: str | None = None,
                 **_: Any):
        from transformers import AutoConfig, AutoModelForCausalLM
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig, RolloutConfig

        from trainer.rollout.embedded import HFSampler

        config = config if isinstance(config, RolloutConfig) else omega_conf_to_dataclass(config)
        if not isinstance(model_config, HFModelConfig):
            model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.config, self.model_config, self.replica_rank = config, model_config, replica_rank
        threads = int(os.environ.get("AERO_VERL_ROLLOUT_THREADS", "0") or 0)
        if threads > 0:
            torch.set_num_threads(threads)
        use_cuda = torch.cuda.is_available() and os.environ.get("VERL_PLATFORM", "").lower() != "cpu"
        self.device = torch.device("cuda", 0) if use_cuda else torch.device("cpu")
        path = model_config.local_path
        if config.load_format == "dummy":  # verl's default: the first weight sync brings the policy
            hf_config = AutoConfig.from_pretrained(path, local_files_only=True)
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)
        self.model = model.to(self.device).eval()
        tok = model_config.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        dtype = torch.bfloat16 if use_cuda else None  # bf16 autocast over fp32 weights on CUDA, as the embedded engine
        self.sampler = HFSampler(self.model, eos_id=stop_ids(path, tok), pad_id=pad, device=self.device,
                                 dtype=dtype)
        self.generator = torch.Generator(self.device).manual_seed(int(config.seed))
        self.step, self.served = 0, {}  # the global step, and how often each det- id was served in it
        self.pending: list[_Request] = []
        self._worker: asyncio.Task | None = None
        self._arrival: asyncio.Event | None = None
        self.calls = self.requests = self.weight_syncs = 0
        self.generate_s = 0.0
        self.awake = True

    # -- the interface verl calls --------------------------------------------------------------

    def get_server_address(self) -> tuple[str, int]:
        """A unique address per replica (verl keys its load balancer by address); no HTTP server."""
        return f"aero-hf-{self.replica_rank}", 0

    async def generate(self, prompt_ids, sampling_params: dict[str, Any], request_id: str, **_: Any) -> TokenOutput:
        prompt = [int(t) for t in (prompt_ids.tolist() if hasattr(prompt_ids, "tolist") else prompt_ids)]
        key = _sampling_key(sampling_params, self.config.response_length, len(prompt), self.config.max_model_len)
        nth = self.served.get(request_id, 0)
        self.served[request_id] = nth + 1
        row_key = request_key(int(self.config.seed), self.step, request_id, nth)
        loop = asyncio.get_running_loop()
        req = _Request(prompt, (*key, row_key is not None), loop.create_future(), row_key)
        self.pending.append(req)
        if self._arrival is None:
            self._arrival = asyncio.Event()
        self._arrival.set()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await req.future

    async def _drain(self) -> None:
        """Close a batch when requests stop arriving (or enough are waiting), run it, repeat."""
        cap = int(self.config.max_num_seqs or 1024)
        while self.pending:
            while len(self.pending) < cap:
                self._arrival.clear()
                try:
                    await asyncio.wait_for(self._arrival.wait(), BATCH_WINDOW_S)
                except asyncio.TimeoutError:
                    break
            key = self.pending[0].key
            batch = [r for r in self.pending if r.key == key][:cap]
            taken = set(map(id, batch))
            self.pending = [r for r in self.pending if id(r) not in taken]
            keys = [r.row_key for r in batch] if key[-1] else None
            try:
                outs = await asyncio.to_thread(self._sample, [r.prompt_ids for r in batch], key[:-1], keys)
            except Exception as e:  # noqa: BLE001 (every waiting request gets the error, none hangs)
                for r in batch:
                    r.future.set_exception(e)
                continue
            for r, out in zip(batch, outs):
                r.future.set_result(out)

    def _sample(self, prompts: list[list[int]], key: tuple, keys: list[int] | None = None) -> list[TokenOutput]:
        from trainer.rollout.base import SamplingParams

        temperature, top_p, max_new, logprobs = key
        t0 = time.perf_counter()
        rollouts = self.sampler.generate(prompts, 1, SamplingParams(temperature=temperature, top_p=top_p,
                                                                   max_new_tokens=max_new), self.generator, keys=keys)
        self.generate_s += time.perf_counter() - t0
        self.calls += 1
        self.requests += len(prompts)
        return [TokenOutput(token_ids=r.response_ids, log_probs=r.logprobs if logprobs else None,
                            stop_reason="completed") for r in rollouts]

    async def update_weights(self, weights: dict[str, torch.Tensor]) -> dict[str, int]:
        """Load the trainer's full tensors (HF names) into the server's model."""
        state = {k: v.to(self.device) for k, v in weights.items()}
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        tied = {"lm_head.weight"} if getattr(self.model.config, "tie_word_embeddings", False) else set()
        if unexpected or set(missing) - tied:
            raise RuntimeError(f"weight sync: missing {sorted(set(missing) - tied)}, unexpected {sorted(unexpected)}")
        self.weight_syncs += 1
        return {"tensors": len(state)}

    def stats(self) -> dict[str, float]:
        """Batched sampler calls, requests served, seconds spent sampling and weight syncs so far."""
        return {"calls": self.calls, "requests": self.requests, "generate_s": self.generate_s,
                "weight_syncs": self.weight_syncs}

    async def set_global_steps(self, global_steps: int) -> None:
        """Reseed per step from (seed, step), so a resumed run samples fresh draws at its step, and
        key this step's det- requests by it."""
        self.generator.manual_seed(int(self.config.seed) * 1_000_003 + int(global_steps))
        self.step, self.served = int(global_steps), {}

    # Memory management is the CUDA allocator's business in vLLM; here there is nothing to free.
    async def wake_up(self, tags: list[str] | None = None) -> None:
        self.awake = True

    async def sleep(self) -> None:
        self.awake = False

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        while self.pending or (self._worker is not None and not self._worker.done()):
            await asyncio.sleep(0.005)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        return None

    async def start_profile(self, **_: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


class HFReplica(RolloutReplica):
    """One HF rollout server per replica, in hybrid mode beside the replica's workers."""

    async def launch_servers(self) -> None:
        from verl.utils.device import get_resource_name

        infos = await asyncio.gather(*[w.__ray_call__.remote(
            lambda self: (ray.get_runtime_context().get_node_id(),
                          ray.get_runtime_context().get_accelerator_ids().get(get_resource_name(), ["0"])))
            for w in self.workers])
        node_id = infos[0][0]
        visible = ",".join(str(i[1][0]) for i in infos if i[1]) if infos else ""
        env = {} if os.environ.get("VERL_PLATFORM", "").lower() == "cpu" else \
            {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": visible}
        server = ray.remote(HFRolloutServer).options(
            num_cpus=0, name=f"aero_hf_server_{self.replica_rank}{self.name_suffix}", max_concurrency=self.max_concurrency,
            scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
            runtime_env={"env_vars": env},
        ).remote(config=self.config, model_config=self.model_config, rollout_mode=self.rollout_mode,
                 replica_rank=self.replica_rank, cuda_visible_devices=visible)
        self.servers = [server]
        self._server_handle = server
        address, _port = await server.get_server_address.remote()
        self._server_address = address


class HFServerAdapter(BaseRollout):
    """The hybrid worker's rollout object: weight sync to its replica's HF server."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1, **_: Any):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        world = self.config.tensor_model_parallel_size * self.config.data_parallel_size * \
            self.config.pipeline_model_parallel_size
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.sends = (rank % world) == 0  # one rank per replica ships the weights
        self._server = None

    def _handle(self):
        if self._server is None:
            self._server = ray.get_actor(f"aero_hf_server_{self.replica_rank}")
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(self, weights, wire_format: str = "named_tensors", **kwargs: Any) -> None:
        if wire_format != "named_tensors":
            raise ValueError(f"the aero_hf rollout takes full named tensors, not {wire_format!r}")
        # every rank consumes the generator (under FSDP each full_tensor() is a collective)
        state = {name: t.detach().to("cpu", copy=True).contiguous() for name, t in weights}
        if self.sends:
            await self._handle().update_weights.remote(state)
        step = kwargs.get("global_steps")
        if self.sends and step is not None:
            await self._handle().set_global_steps.remote(int(step))
