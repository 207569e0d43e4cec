"""The packed grouped-query decode attention (trainer/rollout/attention.py) is the same attention
as transformers' SDPA: the same tokens and log-probs from the same generator, and the same
update forwards (it only changes single-token queries)."""

import copy

import torch
from transformers import AutoModelForCausalLM, Qwen2Config

from trainer.embedded.forward import collate, sequence_logprobs
from trainer.rollout.attention import NAME, use_packed_gqa
from trainer.rollout.base import SamplingParams
from trainer.rollout.embedded import HFSampler

PROMPTS = [[1, 5, 6], [1, 7], [1, 8, 9, 10, 11]]


def gqa_model(heads=6, kv=2, attn="sdpa"):
    cfg = Qwen2Config(vocab_size=50, hidden_size=48, num_hidden_layers=2, num_attention_heads=heads,
                      num_key_value_heads=kv, intermediate_size=64, max_position_embeddings=64,
                      attn_implementation=attn)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg)


def test_packed_decode_samples_what_sdpa_samples():
    stock = gqa_model()
    packed = copy.deepcopy(stock)
    assert use_packed_gqa(packed) and packed.config._attn_implementation == NAME
    sp = SamplingParams(1.0, 1.0, 12)
    a = HFSampler(stock, 2, 0).generate(PROMPTS, [3, 2, 4], sp, torch.Generator().manual_seed(1))
    b = HFSampler(packed, 2, 0).generate(PROMPTS, [3, 2, 4], sp, torch.Generator().manual_seed(1))
    assert [r.response_ids for r in a] == [r.response_ids for r in b]
    assert max(abs(p - q) for x, y in zip(a, b) for p, q in zip(x.logprobs, y.logprobs)) < 1e-5
    assert any(len(r.response_ids) > 1 for r in a)  # decode steps ran, not only the prefill
    batch = collate(a, 0)  # the update's forward (many query tokens) goes to SDPA unchanged
    torch.testing.assert_close(sequence_logprobs(packed, batch, 1.0)[0], sequence_logprobs(stock, batch, 1.0)[0])


def test_only_grouped_sdpa_models_are_switched():
    assert not use_packed_gqa(gqa_model(heads=4, kv=4))  # no grouped heads: nothing to pack
    assert not use_packed_gqa(gqa_model(attn="eager"))  # the tiny preset's eager attention stays
