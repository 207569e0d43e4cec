"""The prompt prefill and KV-cache names the sampler and the update share (trainer/rollout/kv_cache.py)."""

import torch

from trainer.embedded.model import build_model, tiny_qwen2_config
from trainer.rollout.kv_cache import forward_kwargs, left_pad, output_cache

V, BOS, EOS, PAD = 20, 1, 2, 0


def test_left_pad_positions_a_padded_row_as_an_unpadded_one():
    ids, mask, pos = left_pad([[1, 5, 6], [1]], PAD, "cpu")
    assert ids.tolist() == [[1, 5, 6], [0, 0, 1]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert pos.tolist() == [[0, 1, 2], [0, 0, 0]]


def test_a_cache_named_by_forward_kwargs_continues_the_prefill():
    """Prefill, then one token through the cache under the names forward_kwargs gives, equals one
    forward over the whole sequence."""
    model = build_model(tiny_qwen2_config(V, BOS, EOS, PAD, hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=2, num_key_value_heads=2, intermediate_size=64), seed=0)
    model.eval()
    cache_kw, keep_kw = forward_kwargs(model)
    assert cache_kw in ("cache", "past_key_values") and keep_kw in ("logits_to_keep", "num_logits_to_keep", None)
    ids, mask, pos = left_pad([[BOS, 5, 6]], PAD, "cpu")
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
        nxt = torch.tensor([[7]])
        step = model(input_ids=nxt, attention_mask=torch.ones(1, 4, dtype=torch.long), position_ids=torch.tensor([[3]]),
                     use_cache=True, **{cache_kw: output_cache(out)})
        whole = model(input_ids=torch.cat([ids, nxt], 1), use_cache=False)
    torch.testing.assert_close(step.logits[:, -1], whole.logits[:, -1], rtol=1e-5, atol=1e-5)
