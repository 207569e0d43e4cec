"""The slot-cache decode core's helpers (trainer/rollout/static_decode.py): the no-sync sampler's
draws, the bucket ladder, the slot cache, the batch's positions, and the options and arguments the
sampler checks. That every decode path samples what the dynamic loop samples is
tests/trainer/rollout/test_decode_paths.py."""

import pytest
import torch

from tests.trainer.rollout.test_embedded import EOS, PAD, PROMPTS, small_model
from trainer.rollout import make_sampler
from trainer.rollout.base import SamplingParams
from trainer.rollout.continuous import Block
from trainer.rollout.embedded import HFSampler
from trainer.rollout.sampling import exponential_draws, sample_with_draws
from trainer.rollout.static_decode import Batch, SlotCache, bucket_sizes, mask_kind, pick_bucket


def test_exponential_draws_are_torch_multinomials_arithmetic():
    """argmax(p / q) on the draws of :func:`exponential_draws` is torch.multinomial(p, 1): the same
    tokens, and the generator advanced the same (zeros in p, as top-p leaves, included)."""
    for seed in range(20):
        g = torch.Generator().manual_seed(100 + seed)
        B, V = int(torch.randint(1, 30, (1,), generator=g)), int(torch.randint(2, 500, (1,), generator=g))
        p = torch.softmax(3 * torch.randn(B, V, generator=g), -1) * (torch.rand(B, V, generator=g) > 0.3)
        p[:, 0] += 1e-3  # no all-zero row
        g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        expect = torch.multinomial(p, 1, generator=g1)[:, 0]
        assert torch.equal((p / exponential_draws(B, V, g2, p.device)).argmax(-1), expect)
        assert torch.equal(g1.get_state(), g2.get_state())


def test_sample_with_draws_greedy_ignores_draws():
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    tok, lp = sample_with_draws(logits, SamplingParams(0.0, 1.0, 1), None)
    assert tok.tolist() == [1] and lp.item() == pytest.approx(torch.log_softmax(logits, -1)[0, 1].item())


def test_bucket_ladder():
    assert bucket_sizes(8, 0.75) == [1, 2, 3, 4, 5, 6, 8]
    assert bucket_sizes(100, 0.5, 8) == [8, 16, 32, 56, 100]  # ceil(50) -> 56, 28 -> 32, ...
    assert bucket_sizes(1024, 0.75, 8)[-4:] == [432, 576, 768, 1024]
    assert all(s % 8 == 0 for s in bucket_sizes(1024, 0.75, 8))
    assert bucket_sizes(5, 1 - 1e-9) == [1, 2, 3, 4, 5]  # compact_at ~0: a step down at every finish
    assert bucket_sizes(6, -1.0) == [6] == bucket_sizes(6, 0.0)  # compact_at >= 1: never shrink
    assert bucket_sizes(4, 0.75, 8) == [4]
    sizes = bucket_sizes(100, 0.5, 8)
    assert [pick_bucket(sizes, n) for n in (1, 8, 9, 33, 56, 57, 100)] == [8, 8, 16, 56, 56, 100, 100]


def test_slot_cache_writes_the_slot_and_compacts_in_place():
    k = torch.arange(2 * 1 * 3 * 2, dtype=torch.float32).reshape(2, 1, 3, 2)  # 2 prompts, 3 prompt slots
    cache = SlotCache([(k, k + 100)], 3, capacity=5)
    cache.admit(torch.arange(3), torch.tensor([1, 0, 1]))
    cache.rows = 3
    assert torch.equal(cache.keys[0][:, :, :3], k[[1, 0, 1]]) and cache.keys[0][:, :, 3:].abs().sum() == 0
    cache.slot.fill_(3)
    cache.window = 4
    new = torch.full((3, 1, 1, 2), -1.0)
    keys, values = cache.update(new, new, 0)
    assert keys.shape == (3, 1, 4, 2) and torch.equal(keys[:, :, 3], new[:, :, 0])
    address = cache.keys[0].data_ptr()
    cache.compact(torch.tensor([2, 0]))
    assert cache.rows == 2 and cache.keys[0].data_ptr() == address
    assert torch.equal(cache.keys[0][0, :, :3], k[1]) and torch.equal(cache.values[0][1, :, :3], k[1] + 100)
    cache.slot[:2] = torch.tensor([3, 4])  # rows at different tokens write different slots
    cache.window = 5
    keys, _ = cache.update(torch.full((2, 1, 1, 2), -2.0), torch.zeros(2, 1, 1, 2), 0)
    assert keys[0, 0, 3].tolist() == [-2.0, -2.0] and keys[1, 0, 4].tolist() == [-2.0, -2.0]
    assert keys[1, 0, 3].tolist() == [-1.0, -1.0]  # row 1's slot 3 kept what it held


def test_a_finished_rows_position_is_read_once_reused_and_shrunk_away():
    """The batch's positions: the host read hands out each finished row once and frees its
    position, a joining row takes a free position first, and the shrink moves the unread rows to
    the front (in batch order) down the ladder, their tokens and cache rows with them."""
    eng = HFSampler(small_model(), EOS, PAD, decode="static")
    with torch.inference_mode():
        pre = eng._prefill_distinct(PROMPTS, [0, 1, 2, 3])
        s = Batch(eng.model, pre, SamplingParams(1.0, 1.0, 6), eng._static_settings(), 4, keyed=True, refill=True)
        s.admit([(r, r, 100 + r) for r in range(4)])
        s.step()
        s.done[[1, 3]] = True
        out: dict = {}
        assert s.harvest(out.__setitem__) == 2 and sorted(out) == [1, 3] and s.free == [1, 3]
        assert [len(out[r].tokens) for r in (1, 3)] == [2, 2] and s.harvest(out.__setitem__) == 2  # read once
        s.admit([(4, 0, 104)])
        assert s.row[1] == 4 and s.free == [3] and s.b == 4 and s.n[1] == 1
        s.done[1] = True
        s.harvest(out.__setitem__)
        assert 4 in out and s.free == [1, 3]
        tokens2, cache2 = s.tokens[2].clone(), s.cache.keys[0][2].clone()
        s.shrink()  # 2 unread rows: the ladder of 4 at compact_at 0.25 is [1, 2, 3, 4]
        assert s.b == 2 and s.row[:2] == [0, 2] and s.free == [] and s.cache.rows == 2
        assert torch.equal(s.tokens[1], tokens2) and torch.equal(s.cache.keys[0][1], cache2)


def test_attention_without_a_mask_builder_is_refused():
    model = small_model()
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="rollout.decode=dynamic"):
        mask_kind(model)
    windowed = small_model()
    windowed.config.use_sliding_window = True
    with pytest.raises(ValueError, match="sliding-window layers: use rollout.schedule=calls"):  # the stream's fix
        HFSampler(windowed, EOS, PAD).stream(PROMPTS, [Block(0, (1,))], SamplingParams(1.0, 1.0, 4), lambda b, g: [])


def test_engine_options_are_checked_and_wired():
    with pytest.raises(ValueError, match="decode must be"):
        HFSampler(small_model(), EOS, PAD, decode="fast")
    with pytest.raises(ValueError, match="sync_every"):
        HFSampler(small_model(), EOS, PAD, decode="static", sync_every=0)
    built = make_sampler("hf", stop_ids=[EOS], pad_id=PAD, model=small_model(), decode="graphs")
    assert isinstance(built, HFSampler) and built.decode == "graphs"


def test_bad_streams_are_refused():
    eng = HFSampler(small_model(), EOS, PAD)
    assert eng.stream(PROMPTS, [Block(0, ())], SamplingParams(1.0, 1.0, 8), lambda bid, got: []) == []
    with pytest.raises(ValueError, match="non-empty"):
        eng.stream([[]], [Block(0, (1,))], SamplingParams(1.0, 1.0, 8), lambda bid, got: [])
