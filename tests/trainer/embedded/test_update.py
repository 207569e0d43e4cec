"""The update's forward per distinct prompt (trainer.embedded.update.shared_prompt_logprobs) must give
what one right-padded pass gives: log-probs, entropies and gradients, on ragged batches. The
mini-batches are reshuffled each PPO epoch from the run's seeded RNG (only where there are
several), and Dr.GRPO's normaliser is the generation budget in every mini-batch."""

import copy
from dataclasses import replace

import pytest
import torch

from trainer.embedded.forward import collate, sequence_logprobs
from trainer.embedded.model import build_model, enable_gradient_checkpointing, tiny_qwen2_config
from trainer.rollout.base import Rollout, SamplingParams
from trainer.rollout.embedded import HFSampler
import trainer.core.losses as losses
from trainer.spec.config import parse_run_config
from trainer.core.losses import Aggregation
from trainer.embedded.update import (UpdateSettings, Updater, length_buckets, mini_batch_indices, policy_logprobs,
                                     shared_prompt_logprobs, shares_prompts, shuffle_rng)

V, BOS, EOS, PAD = 20, 1, 2, 0
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, intermediate_size=64)
PROMPTS = [[BOS, 5], [BOS, 6, 7, 8, 9, 10, 11], [BOS], [BOS, 3, 4]]  # lengths 2, 7, 1, 3


def small_model(seed=0):
    return build_model(tiny_qwen2_config(V, BOS, EOS, PAD, **SMALL), seed=seed)


def ragged_rollouts(model, counts=(4, 3, 0, 5), max_new_tokens=8, seed=4):
    sp = SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens)
    rollouts = HFSampler(model, EOS, PAD).generate(PROMPTS, list(counts), sp, torch.Generator().manual_seed(seed))
    if max_new_tokens > 1:
        assert any(r.finished for r in rollouts) and not all(r.finished for r in rollouts)  # ragged responses
    return rollouts


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shared_prompt_forward_matches_the_padded_forward(temperature):
    model = small_model().train()
    rollouts = ragged_rollouts(model)
    rollouts = rollouts[5:] + rollouts[:5]  # rows of one prompt need not be adjacent
    batch = collate(rollouts, PAD)
    assert shares_prompts(model, rollouts, batch)
    params = list(model.parameters())
    w = torch.randn(batch.input_ids.shape, generator=torch.Generator().manual_seed(1))
    ref_logp, ref_ent = sequence_logprobs(model, batch, temperature)
    ref_grad = torch.autograd.grad(((ref_logp + 0.1 * ref_ent) * w).sum(), params)
    logp, ent = shared_prompt_logprobs(model, rollouts, batch, temperature, PAD)
    grad = torch.autograd.grad(((logp + 0.1 * ent) * w).sum(), params)
    assert logp.shape == ent.shape == batch.input_ids.shape
    assert torch.allclose(logp, ref_logp, atol=1e-5) and torch.allclose(ent, ref_ent, atol=1e-5)
    mask = batch.response_mask.bool()
    assert torch.all(logp[~mask] == 0) and torch.all(ent[~mask] == 0) and torch.all(logp[mask] < 0)
    for g, r in zip(grad, ref_grad):
        assert torch.allclose(g, r, atol=1e-5, rtol=1e-4)
    if temperature == 1.0:  # the engine's sampling log-probs, as the padded forward gives them
        assert (logp[mask] - batch.old_logprobs[mask]).abs().max() < 1e-4
    logp2, none = shared_prompt_logprobs(model, rollouts, batch, temperature, PAD, with_entropy=False)
    assert none is None and torch.allclose(logp2, logp.detach(), atol=1e-6)


def test_length_buckets_split_off_runaway_rows_only_when_it_pays():
    same_prompt = torch.zeros(8, dtype=torch.long)
    # 7 rows of 2 tokens and one of 9: one pass is 8 x 8 = 64 positions; split at 2 it is
    # 7 x 1 + 1 x 8 + the long row's prompt again (3) = 18
    q = torch.tensor([2, 2, 9, 2, 2, 2, 2, 2])
    short, long_ = length_buckets(q, same_prompt, prompt_width=3)
    assert short.tolist() == [0, 1, 3, 4, 5, 6, 7] and long_.tolist() == [2]
    # 5, 5, 5, 6: one pass 4 x 5 = 20; split at 5: 3 x 4 + 1 x 5 + 3 = 20, no saving
    assert [b.tolist() for b in length_buckets(torch.tensor([5, 5, 5, 6]), same_prompt[:4], 3)] == [[0, 1, 2, 3]]
    # the saving must beat the repeated prompt pass: a 40-token prompt makes the split dearer
    assert len(length_buckets(q, same_prompt, prompt_width=40)) == 1
    assert len(length_buckets(torch.tensor([3]), same_prompt[:1], 3)) == 1


def test_length_buckets_give_the_padded_forward_and_its_gradients():
    """Rows of one prompt in both buckets, and rows of several prompts: log-probs, entropies
    and gradients equal the one right-padded pass's."""
    model = small_model().train()
    rollouts = ragged_rollouts(model, counts=(6, 5, 0, 6))
    for r in rollouts[1:]:  # every response but the first row's cut to <= 2 tokens, the first 8: one runaway row
        if r.length > 2:
            r.response_ids, r.logprobs, r.finished = r.response_ids[:2], r.logprobs[:2], False
    rollouts[0].response_ids, rollouts[0].logprobs, rollouts[0].finished = [7] * 7 + [EOS], [-1.0] * 8, True
    batch = collate(rollouts, PAD)
    buckets = length_buckets(batch.response_lengths, torch.tensor([r.prompt_index for r in rollouts]), 7)
    assert len(buckets) == 2 and buckets[1].tolist() == [0]
    params = list(model.parameters())
    w = torch.randn(batch.input_ids.shape, generator=torch.Generator().manual_seed(3))
    ref_logp, ref_ent = sequence_logprobs(model, batch, 0.8)
    ref_grad = torch.autograd.grad(((ref_logp + 0.1 * ref_ent) * w).sum(), params)
    logp, ent = shared_prompt_logprobs(model, rollouts, batch, 0.8, PAD)
    grad = torch.autograd.grad(((logp + 0.1 * ent) * w).sum(), params)
    assert torch.allclose(logp, ref_logp, atol=1e-5) and torch.allclose(ent, ref_ent, atol=1e-5)
    for g, r in zip(grad, ref_grad):
        assert torch.allclose(g, r, atol=1e-5, rtol=1e-4)
    logp2, none = shared_prompt_logprobs(model, rollouts, batch, 0.8, PAD, with_entropy=False)
    assert none is None and torch.allclose(logp2, logp.detach(), atol=1e-6)


def test_one_token_responses_need_no_second_pass():
    model = small_model().eval()
    rollouts = ragged_rollouts(model, counts=(3, 2, 2, 1), max_new_tokens=1)
    batch = collate(rollouts, PAD)
    with torch.no_grad():
        logp, ent = shared_prompt_logprobs(model, rollouts, batch, 1.0, PAD)
        ref_logp, ref_ent = sequence_logprobs(model, batch, 1.0)
    assert torch.allclose(logp, ref_logp, atol=1e-5) and torch.allclose(ent, ref_ent, atol=1e-5)


def test_the_shared_pass_is_used_only_where_it_saves_work():
    model = small_model()
    shared = ragged_rollouts(model)
    assert shares_prompts(model, shared, collate(shared, PAD))
    one_each = ragged_rollouts(model, counts=(1, 1, 1, 1), seed=0)
    assert not shares_prompts(model, one_each, collate(one_each, PAD))  # distinct prompts: nothing to share
    checkpointed = small_model()
    enable_gradient_checkpointing(checkpointed)  # HF disables the KV cache under it
    assert not shares_prompts(checkpointed, shared, collate(shared, PAD))
    empty = [Rollout(prompt_index=0, prompt_ids=[BOS, 5], response_ids=[], logprobs=[], finished=False)] * 3
    assert not shares_prompts(model, empty, collate(empty, PAD))


def test_policy_update_is_the_same_update_either_way():
    """Two copies of one model, one updated (``Updater.step``) with the shared pass and one
    forced onto the padded pass, end with the same weights and stats (float rounding aside)."""
    base = small_model()
    rollouts = ragged_rollouts(base)
    adv = torch.randn(len(rollouts), generator=torch.Generator().manual_seed(2))
    settings = UpdateSettings(pad_id=PAD, temperature=1.0, eps_low=0.2, eps_high=0.2,
                              agg=Aggregation("seq-mean-token-mean"), entropy_coef=1e-3, kl_coef=0.1, grad_clip=1.0,
                              epochs=2, mini_batches=2)
    results = []
    for force_padded in (False, True):
        model = copy.deepcopy(base)
        ref = copy.deepcopy(base).eval().requires_grad_(False)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        with pytest.MonkeyPatch.context() as mp:
            if force_padded:
                mp.setattr("trainer.embedded.update.shares_prompts", lambda *a: False)
            stats = Updater(model, opt, sched, settings, ref_model=ref).step(rollouts, adv)
        results.append((stats, [p.detach().clone() for p in model.parameters()]))
    (s1, p1), (s2, p2) = results
    assert s1.keys() == s2.keys() and all(abs(s1[k] - s2[k]) < 1e-4 for k in s1)
    assert s1["train/kl"] > 0  # the second epoch moved away from the reference
    assert any((a - b0).abs().max() > 1e-3 for a, b0 in zip(p1, base.parameters()))  # it trained
    # AdamW's normalised step (m / sqrt(v)) turns rounding in near-zero gradients into weight
    # differences of a few lr x 1e-4 after 4 steps: 1.3e-5 on an AVX-512 CPU (lr 1e-2), under 1e-5
    # on others. A real divergence between the two passes moves weights by ~lr (1e-2).
    for a, b in zip(p1, p2):
        assert torch.allclose(a, b, atol=5e-5), (a - b).abs().max()


def test_policy_logprobs_falls_back_to_the_padded_pass():
    model = small_model().eval()
    rollouts = ragged_rollouts(model, counts=(1, 1, 1, 1), seed=0)
    batch = collate(rollouts, PAD)
    with torch.no_grad():
        logp, ent = policy_logprobs(model, rollouts, batch, 1.0, PAD)
        ref_logp, ref_ent = sequence_logprobs(model, batch, 1.0)
    assert torch.equal(logp, ref_logp) and torch.equal(ent, ref_ent)


def test_one_mini_batch_keeps_the_order_and_draws_nothing():
    """One mini-batch (asked for, or forced by a single row) has no partition to change: the
    rows stay in order and the RNG is untouched, so such runs are what they were unshuffled."""
    rng = shuffle_rng(0)
    before = rng.bit_generator.state
    for n, k in ((10, 1), (1, 4)):
        [idx] = mini_batch_indices(n, k, rng)
        assert idx.tolist() == list(range(n))
    assert rng.bit_generator.state == before


def test_mini_batches_are_reshuffled_each_epoch_reproducibly():
    def partitions(rng, n=10, k=4, epochs=3):
        return [[frozenset(i.tolist()) for i in mini_batch_indices(n, k, rng)] for _ in range(epochs)]

    a, b, c = partitions(shuffle_rng(0)), partitions(shuffle_rng(0)), partitions(shuffle_rng(1))
    assert a == b and a != c  # by seed
    assert a[0] != a[1] != a[2]  # a new partition each epoch
    for epoch in a:  # every row once, in tensor_split's sizes
        assert [len(p) for p in epoch] == [3, 3, 2, 2] and frozenset().union(*epoch) == frozenset(range(10))
    unshuffled = [frozenset(i.tolist()) for i in mini_batch_indices(10, 4, None)]
    assert unshuffled == [frozenset(i.tolist()) for i in torch.arange(10).tensor_split(4)]


def _updater(base, shuffle, **settings):
    model = copy.deepcopy(base)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    base_settings = UpdateSettings(pad_id=PAD, temperature=1.0, eps_low=0.2, eps_high=0.2,
                                   agg=Aggregation("seq-mean-token-mean"), entropy_coef=1e-3, grad_clip=1.0)
    return Updater(model, opt, sched, replace(base_settings, **settings), shuffle=shuffle)


def _params(updater):
    return [p.detach().clone() for p in updater.model.parameters()]


def test_one_mini_batch_update_is_bit_identical_with_or_without_the_shuffle_rng():
    base = small_model()
    rollouts = ragged_rollouts(base)
    adv = torch.randn(len(rollouts), generator=torch.Generator().manual_seed(2))
    plain, seeded = _updater(base, None, epochs=2), _updater(base, shuffle_rng(3), epochs=2)
    assert plain.step(rollouts, adv) == seeded.step(rollouts, adv)
    assert all(torch.equal(a, b) for a, b in zip(_params(plain), _params(seeded)))
    assert seeded.shuffle.bit_generator.state == shuffle_rng(3).bit_generator.state  # never drawn


def test_several_mini_batches_train_on_a_new_partition_each_epoch(monkeypatch):
    base = small_model()
    rollouts = ragged_rollouts(base)
    adv = torch.randn(len(rollouts), generator=torch.Generator().manual_seed(2))
    adv_of = {id(r): float(a) for r, a in zip(rollouts, adv)}
    seen: list[frozenset[int]] = []
    step_one = Updater.mini_batch_step

    def spy(self, rows, advantages, agg):
        assert advantages.tolist() == pytest.approx([adv_of[id(r)] for r in rows])  # advantages follow their rows
        assert agg.n_seqs == len(rollouts) / 3  # the same normaliser in every mini-batch
        seen.append(frozenset(id(r) for r in rows))
        return step_one(self, rows, advantages, agg)

    monkeypatch.setattr(Updater, "mini_batch_step", spy)
    runs = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        seen.clear()
        u = _updater(base, shuffle_rng(seed), epochs=2, mini_batches=3)
        runs[name] = (u.step(rollouts, adv), _params(u), list(seen))
    first, second = runs["a"][2][:3], runs["a"][2][3:]
    assert set(first) != set(second)  # the second epoch does not replay the first one's partition
    assert frozenset().union(*first) == frozenset().union(*second) == frozenset(adv_of)
    assert runs["a"][0] == runs["b"][0] and all(torch.equal(x, y) for x, y in zip(runs["a"][1], runs["b"][1]))
    assert runs["a"][2] != runs["c"][2]  # another seed, other partitions


def test_dr_grpo_divides_by_max_new_tokens_in_every_mini_batch(monkeypatch):
    """The constant is the run's generation budget, whatever each mini-batch's padded width."""
    cfg = parse_run_config({"preset": "tiny", "method": "drgrpo", "max_new_tokens": 8, "mini_batches": 3,
                            "ppo_epochs": 2})
    settings = UpdateSettings.from_config(cfg, pad_id=PAD)
    assert settings.agg == Aggregation("seq-mean-token-sum-norm", max_len=8)
    assert (settings.epochs, settings.mini_batches) == (2, 3)
    calls: list[tuple[int, int | None]] = []
    aggregate = losses.aggregate

    def spy(values, mask, mode, max_len=None, n_seqs=None, n_tokens=None):
        calls.append((values.shape[-1], max_len))
        return aggregate(values, mask, mode, max_len, n_seqs, n_tokens)

    monkeypatch.setattr(losses, "aggregate", spy)
    base = small_model()
    rollouts = ragged_rollouts(base, max_new_tokens=8)
    adv = torch.randn(len(rollouts), generator=torch.Generator().manual_seed(2))
    _updater(base, shuffle_rng(0), **{k: getattr(settings, k) for k in ("agg", "epochs", "mini_batches")}).step(
        rollouts, adv)
    assert len({width for width, _ in calls}) > 1  # mini-batches of different padded widths ...
    assert {max_len for _, max_len in calls} == {8}  # ... one normaliser


def test_the_updater_is_built_from_the_config():
    cfg = parse_run_config({"preset": "tiny", "method": "dapo", "kl_coef": 0.01, "mini_batches": 2, "ppo_epochs": 2,
                            "steps": 10, "optim": {"lr": 1e-3, "warmup_steps": 2}})
    model = small_model()
    u = Updater.from_config(cfg, model, pad_id=PAD)
    assert u.model is model and u.ref_model is not None and u.extra_forwards == 1
    assert (u.settings.eps_low, u.settings.eps_high) == (cfg.dapo.eps_low, cfg.dapo.eps_high)  # clip-higher
    assert u.settings.agg == Aggregation("token-mean", max_len=cfg.max_new_tokens)
    assert u.lr == pytest.approx(1e-3 / 8)  # warmup: 2 steps x 4 optimizer steps each
    assert u.shuffle.bit_generator.state == shuffle_rng(cfg.seed).bit_generator.state
    # shuffle_mini_batches=false keeps generation order (verl's layout): no shuffle RNG at all
    kept = Updater.from_config(cfg.model_copy(update={"shuffle_mini_batches": False}), small_model(), pad_id=PAD)
    assert kept.shuffle is None
