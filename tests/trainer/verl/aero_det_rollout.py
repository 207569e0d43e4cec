"""A test-only verl plugin: the aero_hf rollout server with order-independent sampling, so two
verl runs of one seed sample the same tokens whatever their data-parallel size.

Why: the shipped server (trainer/verl/plugins/hf_rollout.py) samples each batch of requests
from ONE generator per replica, in arrival order. verl's agent loop builds prompt ids in a
thread pool, so the order requests reach the server varies run to run, and with two FSDP
ranks there are two replicas, each drawing from its own copy of the generator: two runs of one
seed (even both at dp=1) sample different tokens. Measured: tiny GRPO, seed 3, dp=1 twice:
step 1 generated 217 vs 216 tokens, reward 0.516 vs 0.5625.

This server honours verl's ``rollout.full_determinism``: the agent loop then names each request
``det-<index of the sample in its generate call>`` and the load balancer routes an id to the
same replica every time. Each request is sampled alone, with a generator seeded from (rollout
seed, global step, request id, how many times this id was served in this step), so a sample's
draws depend on neither the arrival order, nor the batch it lands in, nor the replica that
serves it. Loaded in every Ray process through ``VERL_USE_EXTERNAL_MODULES`` (after
``trainer.verl.plugins``), with this directory on ``PYTHONPATH``; see :func:`enable`.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import Any

MODULE = "aero_det_rollout"
HERE = Path(__file__).resolve().parent
OVERRIDE = "actor_rollout_ref.rollout.full_determinism=true"


def enable(monkeypatch) -> None:
    """Make the next run_verl in this process use this server (pytest's monkeypatch undoes it)."""
    from trainer.verl import runner

    plain = runner.platform_env

    def platform_env(device: str) -> dict[str, str]:
        env = plain(device)
        env["VERL_USE_EXTERNAL_MODULES"] = f"{env['VERL_USE_EXTERNAL_MODULES']},{MODULE}"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
        return env

    monkeypatch.setattr(runner, "platform_env", platform_env)
    for var in ("PYTHONPATH", "VERL_USE_EXTERNAL_MODULES"):  # run_verl copies the env into os.environ: undo it
        if var in os.environ:
            monkeypatch.setenv(var, os.environ[var])
        else:
            monkeypatch.setenv(var, "")
            monkeypatch.delenv(var)
    extra = os.environ.get("AERO_VERL_OVERRIDES", "")
    monkeypatch.setenv("AERO_VERL_OVERRIDES", f"{extra} {OVERRIDE}".strip())


def request_seed(seed: int, step: int, request_id: str, nth: int) -> int:
    digest = hashlib.sha256(f"{seed}/{step}/{request_id}/{nth}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _install() -> None:
    import torch

    from trainer.verl.plugins import hf_rollout

    if not hasattr(hf_rollout, "TokenOutput") or not hasattr(hf_rollout, "HFReplica"):
        return  # hf_rollout is itself being imported (it imports verl, which imports us): __getattr__ later
    if getattr(hf_rollout.HFRolloutServer, "order_independent", False):
        return

    class OrderIndependentServer(hf_rollout.HFRolloutServer):
        order_independent = True

        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.det_step, self.det_seen, self.det_lock = 0, {}, None

        async def generate(self, prompt_ids, sampling_params: dict[str, Any], request_id: str, **_: Any):
            from trainer.rollout.base import SamplingParams

            if not str(request_id).startswith("det-"):
                raise RuntimeError("the order-independent test server needs rollout.full_determinism=true")
            prompt = [int(t) for t in (prompt_ids.tolist() if hasattr(prompt_ids, "tolist") else prompt_ids)]
            temperature, top_p, max_new, logprobs = hf_rollout._sampling_key(
                sampling_params, self.config.response_length, len(prompt), self.config.max_model_len)
            key = (self.det_step, str(request_id))
            nth = self.det_seen.get(key, 0)
            self.det_seen[key] = nth + 1
            gen = torch.Generator(self.device).manual_seed(request_seed(int(self.config.seed), *key, nth))
            if self.det_lock is None:
                self.det_lock = asyncio.Lock()
            async with self.det_lock:  # one sample at a time: the model is not shared across threads
                (r,) = await asyncio.to_thread(self.sampler.generate, [prompt], 1, SamplingParams(
                    temperature=temperature, top_p=top_p, max_new_tokens=max_new), gen)
            self.calls += 1
            self.requests += 1
            return hf_rollout.TokenOutput(token_ids=r.response_ids, log_probs=r.logprobs if logprobs else None,
                                          stop_reason="completed")

        async def set_global_steps(self, global_steps: int) -> None:
            await super().set_global_steps(global_steps)
            self.det_step, self.det_seen = int(global_steps), {}

    OrderIndependentServer.__module__ = MODULE
    OrderIndependentServer.__qualname__ = "OrderIndependentServer"
    globals()["OrderIndependentServer"] = OrderIndependentServer  # pickled by reference: this module's name
    hf_rollout.HFRolloutServer = OrderIndependentServer  # HFReplica.launch_servers looks it up here


def __getattr__(name: str):
    """Ray unpickles the server class by this module's name, maybe before _install ran here."""
    if name == "OrderIndependentServer":
        _install()
        if name in globals():
            return globals()[name]
    raise AttributeError(name)


if MODULE in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(","):  # a verl process of a run using it
    _install()
