"""The static-shape decode (trainer/rollout/static_decode.py) samples what the dynamic decode
samples: the same tokens and finishes from the same generator, log-probs to float rounding, and
the generator left where the dynamic decode leaves it; with fixed shapes and few host reads."""

import copy

import pytest
import torch

from tests.trainer.rollout.test_attention import PROMPTS as GQA_PROMPTS
from tests.trainer.rollout.test_attention import gqa_model
from tests.trainer.rollout.test_embedded import EOS, PAD, PROMPTS, eos_biased_model, no_cache_logprobs, small_model
from trainer.rollout import make_sampler
from trainer.rollout.attention import use_packed_gqa
from trainer.rollout.base import SamplingParams
from trainer.rollout.embedded import HFSampler
from trainer.rollout.sampling import exponential_draws, sample_with_draws
from trainer.rollout.static_decode import DecodeState, SlotCache, bucket_sizes, mask_kind, pick_bucket

SAMPLINGS = {"T1": SamplingParams(1.0, 1.0, 8), "top_p": SamplingParams(0.8, 0.7, 8),
             "greedy": SamplingParams(0.0, 1.0, 8)}
OPTIONS = {"default": {}, "sync_every_3": {"sync_every": 3}, "shrink_every_finish": {"compact_at": 1e-9},
           "never_shrink": {"compact_at": 2.0}, "chunks_of_5": {"max_batch_rows": 5}}


def run(model, sp, counts, decode="dynamic", prompts=PROMPTS, eos=EOS, pad=PAD, seed=7, **kw):
    """(rollouts, the generator's state afterwards)."""
    if decode == "dynamic":
        kw.pop("sync_every", None)
    g = torch.Generator().manual_seed(seed)
    out = HFSampler(model, eos, pad, decode=decode, **kw).generate(prompts, counts, sp, g)
    return out, g.get_state()


def assert_same(a, b, tol=1e-5):
    assert [(r.prompt_index, r.response_ids, r.finished) for r in a] == [(r.prompt_index, r.response_ids, r.finished)
                                                                         for r in b]
    assert [lp for r in a for lp in r.logprobs] == pytest.approx([lp for r in b for lp in r.logprobs], abs=tol)


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
    cache = SlotCache([(k, k + 100)], torch.tensor([1, 0, 1]), capacity=5)
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


@pytest.mark.parametrize("decode", ["static", "graphs"])
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("sampling", list(SAMPLINGS))
@pytest.mark.parametrize("eos_bias", [None, 3.0])
def test_static_samples_what_dynamic_samples(decode, option, sampling, eos_bias):
    """eos_bias 3: EOS ~1/2 per step, rows finish at different steps; None: most rows reach
    max_new_tokens. Greedy, top-p, a host read every 3 steps, shrinking after every finish or
    never, 5-row chunks: tokens, finishes and the generator's state equal the dynamic decode's."""
    model = small_model() if eos_bias is None else eos_biased_model(eos_bias)
    sp, kw = SAMPLINGS[sampling], OPTIONS[option]
    a, state_a = run(model, sp, [3, 1, 2, 4], **kw)
    b, state_b = run(model, sp, [3, 1, 2, 4], decode=decode, **kw)
    assert_same(a, b)
    assert torch.equal(state_a, state_b)
    if eos_bias is not None and sampling == "T1":
        assert len({r.length for r in a}) >= 3  # the batch really finishes over several steps


def test_eos_and_max_new_tokens_stops():
    sp = SamplingParams(1.0, 1.0, 5)
    out, _ = run(eos_biased_model(+60.0), sp, 2, decode="static")
    assert all(r.response_ids == [EOS] and r.finished and -1e-3 < r.logprobs[0] <= 0 for r in out)
    out, _ = run(eos_biased_model(-60.0), sp, 2, decode="static", sync_every=2)
    assert all(len(r.response_ids) == 5 and not r.finished and EOS not in r.response_ids for r in out)


def test_several_stop_ids_and_uncached_logprobs():
    model, sp = small_model(), SamplingParams(1.0, 1.0, 6)
    plain, _ = run(model, sp, 8, seed=3)
    stops = [EOS, *sorted({r.response_ids[0] for r in plain if r.response_ids} - {EOS})[:3]]
    a, _ = run(model, sp, 8, eos=stops, seed=3)
    b, _ = run(model, sp, 8, decode="static", eos=stops, seed=3, compact_at=1e-9)
    assert_same(a, b)
    assert any(r.response_ids[-1] in stops[1:] for r in b)
    for r in b:  # a wrongly compacted cache would condition a row on another row's context
        assert r.logprobs == pytest.approx(no_cache_logprobs(model, r.prompt_ids, r.response_ids, 1.0), abs=1e-4)


def tiny_preset_prompts(n: int):
    from trainer.embedded.model import load_policy
    from trainer.embedded.presets import PRESETS
    from trainer.tasks import make_task
    from trainer.tasks.tokenizer import CharTokenizer

    tok = CharTokenizer.load(PRESETS["tiny"])
    task = make_task("arithmetic", tokenizer=tok, benchmark_size=8)
    return load_policy(PRESETS["tiny"]), tok, [task.encode_prompt(p) for p in task.train_problems(0, n, 0)]


@pytest.mark.parametrize("decode", ["static", "graphs"])
def test_tiny_preset_answers_finish_at_different_steps(decode):
    """The shipped policy's answers of 2-5 tokens: the batch shrinks several times mid-call."""
    model, tok, prompts = tiny_preset_prompts(6)
    sp = SamplingParams(1.0, 1.0, 8)
    a, state_a = run(model, sp, 4, prompts=prompts, eos=tok.eos_id, pad=tok.pad_id)
    b, state_b = run(model, sp, 4, decode=decode, prompts=prompts, eos=tok.eos_id, pad=tok.pad_id, sync_every=2)
    assert len({r.length for r in a}) >= 3
    assert_same(a, b)
    assert torch.equal(state_a, state_b)


@pytest.mark.parametrize("attn", ["sdpa", "packed", "eager"])
def test_grouped_query_models_on_each_attention(attn):
    stock = gqa_model(attn="eager" if attn == "eager" else "sdpa")
    model = copy.deepcopy(stock)
    if attn == "packed":
        assert use_packed_gqa(model)
    sp = SamplingParams(1.0, 0.9, 12)
    a, _ = run(stock, sp, [3, 2, 4], prompts=GQA_PROMPTS, eos=[2, 7], pad=0)
    for decode in ("static", "graphs"):
        b, _ = run(model, sp, [3, 2, 4], decode=decode, prompts=GQA_PROMPTS, eos=[2, 7], pad=0, sync_every=4)
        assert_same(a, b)


def test_forward_shapes_stay_on_the_ladder_and_the_host_is_read_every_k_steps(monkeypatch):
    """graphs: every decode forward has the full key length and a batch size of the ladder (what
    CUDA graphs capture); the host is read once per sync_every steps, not per token."""
    model = eos_biased_model(3.0)
    seen, reads = [], []
    hook = model.register_forward_pre_hook(lambda m, args, kw: seen.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    live = DecodeState.live
    monkeypatch.setattr(DecodeState, "live", lambda self: reads.append(1) or live(self))
    sp = SamplingParams(1.0, 1.0, 12)
    run(model, sp, 16, decode="graphs", sync_every=4, compact_at=0.5)
    hook.remove()
    decode_batches = {b for b, q in seen if q == 1}
    assert decode_batches <= set(bucket_sizes(64, 0.5, 8)) and len(decode_batches) >= 2
    steps = len([s for s in seen if s[1] == 1]) + 1
    assert len(reads) <= -(-steps // 4)


def test_attention_without_a_mask_builder_is_refused():
    model = small_model()
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="rollout_decode=dynamic"):
        mask_kind(model)


def test_non_finite_logits_raise_as_multinomial_does():
    model = small_model()
    with torch.no_grad():
        model.lm_head.weight[3] = float("nan")
    with pytest.raises(RuntimeError, match="nan"):
        run(model, SamplingParams(1.0, 1.0, 4), 2)
    with pytest.raises(RuntimeError, match="nan"):
        run(model, SamplingParams(1.0, 1.0, 4), 2, decode="static")


def test_engine_options_are_checked_and_wired():
    with pytest.raises(ValueError, match="decode must be"):
        HFSampler(small_model(), EOS, PAD, decode="fast")
    with pytest.raises(ValueError, match="sync_every"):
        HFSampler(small_model(), EOS, PAD, decode="static", sync_every=0)
    built = make_sampler("hf", stop_ids=[EOS], pad_id=PAD, model=small_model(), decode="graphs")
    assert isinstance(built, HFSampler) and built.decode == "graphs"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_cuda_graphs_sample_what_dynamic_samples_on_a_gpu():
    """Runs only where CUDA is present (not on the project's CPU test machine)."""
    model = eos_biased_model(3.0).cuda()
    sp = SamplingParams(1.0, 0.9, 12)
    g = [torch.Generator(device="cuda").manual_seed(1) for _ in range(3)]
    out = [HFSampler(model, EOS, PAD, decode=d).generate(PROMPTS, 8, sp, gen)
           for d, gen in zip(("dynamic", "static", "graphs"), g)]
    assert_same(out[0], out[1], tol=1e-4)
    assert_same(out[0], out[2], tol=1e-4)
    assert torch.equal(g[0].get_state(), g[2].get_state())
