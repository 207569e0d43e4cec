"""collate alignment and sequence_logprobs: the PPO ratio's old/new log-probs must agree."""

import pytest
import torch

from trainer.embedded import forward
from trainer.embedded.forward import collate, sequence_logprobs, token_logprobs_and_entropy
from trainer.embedded.model import build_model, tiny_qwen2_config
from trainer.rollout.base import Rollout, SamplingParams
from trainer.rollout.embedded import HFSampler

V, BOS, EOS, PAD = 20, 1, 2, 0
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
             intermediate_size=64)
PROMPTS = [[BOS, 5], [BOS, 6, 7, 8, 9, 10, 11], [BOS], [BOS, 3, 4]]  # lengths 2, 7, 1, 3


def small_model(seed=0):
    return build_model(tiny_qwen2_config(V, BOS, EOS, PAD, **SMALL), seed=seed)


def test_collate_hand_computed():
    a = Rollout(prompt_index=0, prompt_ids=[1, 5, 6], response_ids=[7, 2], logprobs=[-0.5, -1.0],
                finished=True, reward=1.0)
    b = Rollout(prompt_index=3, prompt_ids=[1, 5], response_ids=[8, 9, 10], logprobs=[-0.1, -0.2, -0.3],
                finished=False)
    batch = collate([a, b], pad_id=PAD, device="cpu")
    assert batch.input_ids.tolist() == [[1, 5, 6, 7, 2], [1, 5, 8, 9, 10]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert batch.response_mask.tolist() == [[0, 0, 0, 1, 1], [0, 0, 1, 1, 1]]
    assert torch.allclose(batch.old_logprobs, torch.tensor([[0, 0, 0, -0.5, -1.0], [0, 0, -0.1, -0.2, -0.3]]))
    assert batch.prompt_lengths.tolist() == [3, 2] and batch.response_lengths.tolist() == [2, 3]
    assert batch.lengths.tolist() == [5, 5] and batch.prompt_index.tolist() == [0, 3]
    assert batch.rewards.tolist() == [1.0, 0.0] and batch.num_response_tokens == 5

    c = Rollout(prompt_index=1, prompt_ids=[1], response_ids=[2], logprobs=[-2.0], finished=True)
    batch = collate([a, c], pad_id=PAD)
    assert batch.input_ids.tolist() == [[1, 5, 6, 7, 2], [1, 2, 0, 0, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert batch.response_mask.tolist() == [[0, 0, 0, 1, 1], [0, 1, 0, 0, 0]]
    assert batch.old_logprobs[1].tolist() == [0.0, -2.0, 0.0, 0.0, 0.0]


def test_collate_rejects_mismatched_logprobs():
    bad = Rollout(prompt_index=0, prompt_ids=[1], response_ids=[3, 4], logprobs=[-1.0], finished=False)
    with pytest.raises(ValueError, match="logprobs"):
        collate([bad], pad_id=PAD)
    with pytest.raises(ValueError):
        collate([], pad_id=PAD)


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.8)])
def test_sequence_logprobs_reproduce_sampling_logprobs(temperature, top_p):
    """THE alignment test: left-padded KV-cache sampling and right-padded training forward
    give the same log-probs on every response token (top-p does not renormalise them)."""
    model = small_model()
    model.train()  # sequence_logprobs is used in train mode; Qwen2 has no dropout at p=0
    sp = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=8)
    rollouts = HFSampler(model, EOS, PAD).generate(PROMPTS, [3, 2, 2, 1], sp, torch.Generator().manual_seed(4))
    assert any(r.finished for r in rollouts) and not all(r.finished for r in rollouts)  # ragged responses
    batch = collate(rollouts, pad_id=PAD)
    with torch.no_grad():
        logp, ent = sequence_logprobs(model, batch, temperature)
    mask = batch.response_mask.bool()
    assert logp.shape == ent.shape == batch.input_ids.shape
    assert (logp[mask] - batch.old_logprobs[mask]).abs().max() < 1e-4
    assert torch.all(logp[~mask] == 0) and torch.all(ent[~mask] == 0)
    assert torch.all(ent[mask] > 0) and torch.all(ent[mask] <= torch.log(torch.tensor(float(V))) + 1e-5)


def test_token_logprobs_and_entropy_against_categorical(monkeypatch):
    monkeypatch.setattr(forward, "CHUNK_ELEMENTS", 2 * 3 * 7)  # 2 rows per block: 3 blocks
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 3, 7, generator=g, requires_grad=True)
    targets = torch.randint(0, 7, (5, 3), generator=g)
    logp, ent = token_logprobs_and_entropy(logits, targets, temperature=0.5)
    dist = torch.distributions.Categorical(logits=logits / 0.5)
    ref_logp, ref_ent = dist.log_prob(targets), dist.entropy()
    assert torch.allclose(logp, ref_logp, atol=1e-5) and torch.allclose(ent, ref_ent, atol=1e-5)
    w = torch.randn(5, 3, generator=g)
    (grad,) = torch.autograd.grad((logp * w).sum() + (ent * w).sum(), logits)
    (ref_grad,) = torch.autograd.grad((ref_logp * w).sum() + (ref_ent * w).sum(), logits)
    assert torch.allclose(grad, ref_grad, atol=1e-5)


def test_sequence_logprobs_is_differentiable():
    model = small_model()
    rollouts = HFSampler(model, EOS, PAD).generate(PROMPTS, 1, SamplingParams(max_new_tokens=4),
                                                   torch.Generator().manual_seed(0))
    batch = collate(rollouts, pad_id=PAD)
    logp, ent = sequence_logprobs(model, batch, 1.0)
    (logp.sum() + 0.1 * ent.sum()).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    logp2, none = sequence_logprobs(model, batch, 1.0, with_entropy=False)
    assert none is None and torch.allclose(logp2, logp.detach(), atol=1e-6)
