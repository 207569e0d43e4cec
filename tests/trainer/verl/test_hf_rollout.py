"""The shipped HF rollout server for verl (trainer/verl/plugins/hf_rollout.py) samples each
``det-<index>`` request from its own key: the same tokens whatever order the requests arrive in
and whatever batch they share, and other tokens at the next step or for the same id served again
in a step (a rescue call reuses sample indices). Requests without such an id draw from the
replica's stream. The server runs in-process here (its Ray actor wrapper aside) on the tiny
preset's weights, through its real ``generate`` / batching path."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("verl")

from trainer.verl.plugins import hf_rollout  # noqa: E402

PARAMS = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 8, "logprobs": True}


def server() -> hf_rollout.HFRolloutServer:
    from transformers import AutoModelForCausalLM

    from trainer.embedded.presets import PRESETS
    from trainer.rollout.embedded import HFSampler

    s = object.__new__(hf_rollout.HFRolloutServer)  # what __init__ builds, without verl's config objects
    model = AutoModelForCausalLM.from_pretrained(PRESETS["tiny"], local_files_only=True, dtype=torch.float32).eval()
    s.config = SimpleNamespace(seed=3, response_length=8, max_model_len=None, max_num_seqs=1024)
    s.device = torch.device("cpu")
    s.sampler = HFSampler(model, eos_id=2, pad_id=0, device=s.device)
    s.generator = torch.Generator().manual_seed(3)
    s.step, s.served, s.pending, s._worker, s._arrival = 0, {}, [], None, None
    s.calls = s.requests = s.weight_syncs = 0
    s.generate_s = 0.0
    return s


PROMPTS = {i: [1, 3 + i % 7, 4, 5 + i % 3, 6] for i in range(12)}  # a few distinct prompts, repeated


def run(s, coro):
    """``coro`` on a fresh event loop (the actor has one loop for its life; a test makes several)."""
    s._arrival, s._worker = None, None
    return asyncio.run(coro)


def serve(s, ids: list[int], step: int = 1, prefix: str = "det-") -> dict[int, list[int]]:
    async def go():
        await s.set_global_steps(step)
        outs = await asyncio.gather(*[s.generate(PROMPTS[i], PARAMS, f"{prefix}{i}") for i in ids])
        return {i: list(o.token_ids) for i, o in zip(ids, outs)}

    return run(s, go())


def test_keyed_requests_sample_the_same_tokens_in_any_order_and_batch():
    s = server()
    ids = list(range(12))
    ref = serve(s, ids)
    shuffled = ids[:]
    random.Random(0).shuffle(shuffled)
    assert serve(server(), shuffled) == ref  # another arrival order, another server
    halves = server()  # two batches, the second half first
    split = {**serve(halves, ids[6:]), **run(halves, _more(halves, ids[:6]))}
    assert split == ref
    lone = {i: serve(server(), [i])[i] for i in (0, 5, 11)}  # each sampled alone
    assert lone == {i: ref[i] for i in (0, 5, 11)}
    assert s.calls == 1 and s.requests == 12  # one batched call for the twelve


def test_the_next_step_and_a_second_serving_draw_afresh():
    s = server()
    first = serve(s, list(range(12)), step=1)
    again = run(s, _same_step_again(s))  # the same ids once more in step 1: a rescue call's indices
    assert again != {i: first[i] for i in again}
    assert serve(server(), list(range(12)), step=2) != first


async def _more(s, ids):
    outs = await asyncio.gather(*[s.generate(PROMPTS[i], PARAMS, f"det-{i}") for i in ids])
    return {i: list(o.token_ids) for i, o in zip(ids, outs)}


async def _same_step_again(s):
    outs = await asyncio.gather(*[s.generate(PROMPTS[i], PARAMS, f"det-{i}") for i in range(12)])
    return {i: list(o.token_ids) for i, o in enumerate(outs)}


def test_ids_without_the_det_prefix_draw_from_the_stream():
    assert hf_rollout.request_key(3, 1, "5f2c9a", 0) is None and hf_rollout.request_key(3, 1, "det-x", 0) is None
    keys = {hf_rollout.request_key(3, step, f"det-{i}", nth) for step in (1, 2) for i in range(50) for nth in (0, 1)}
    assert len(keys) == 200 and all(-(2**63) <= k < 2**63 for k in keys)
    s = server()
    a = serve(s, list(range(12)), prefix="uuid")
    assert s.calls == 1 and len(a) == 12
