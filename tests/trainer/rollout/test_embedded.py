"""HFSampler: order/counts, determinism, stopping, greedy, KV cache vs recomputation."""

import math
import time
from typing import get_args

import pytest
import torch

from trainer.spec.sampler_registry import RolloutConfig
from trainer.embedded.model import build_model, tiny_qwen2_config
from trainer.rollout import make_sampler
from trainer.rollout.base import SamplingParams
from trainer.rollout.embedded import HFSampler, expand_counts, live_rows, top_p_filter
from trainer.spec.sampler_registry import SAMPLER_NAMES

V, BOS, EOS, PAD = 20, 1, 2, 0
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
             intermediate_size=64)
PROMPTS = [[BOS, 5], [BOS, 6, 7, 8, 9], [BOS], [BOS, 3, 4]]


def small_model(seed=0, **over):
    return build_model(tiny_qwen2_config(V, BOS, EOS, PAD, **{**SMALL, **over}), seed=seed)


def eos_biased_model(bias: float):
    """Untied model whose EOS logit is shifted by about ``bias`` at every position: a large
    constant component in every embedding survives the final RMSNorm as ~sqrt(H) and only
    the EOS row of the LM head reads it."""
    m = small_model(tie_word_embeddings=False)
    H = m.config.hidden_size
    with torch.no_grad():
        m.model.embed_tokens.weight[:, 0] = 30.0
        m.lm_head.weight[:, 0] = 0.0
        m.lm_head.weight[EOS, 0] = bias / math.sqrt(H)
    return m


def engine(model, **kw):
    return HFSampler(model, eos_id=EOS, pad_id=PAD, **kw)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def test_expand_counts():
    assert expand_counts(3, 2) == [2, 2, 2]
    assert expand_counts(2, [0, 3]) == [0, 3] == expand_counts(2, torch.tensor([0, 3]))
    with pytest.raises(ValueError):
        expand_counts(2, [1])
    with pytest.raises(ValueError):
        expand_counts(1, [-1])


def test_top_p_filter_keeps_smallest_nucleus():
    p = torch.tensor([[0.1, 0.5, 0.3, 0.1]])
    assert torch.equal(top_p_filter(p, 0.5), torch.tensor([[0.0, 0.5, 0.0, 0.0]]))  # 0.5 alone reaches 0.5
    assert torch.equal(top_p_filter(p, 0.6), torch.tensor([[0.0, 0.5, 0.3, 0.0]]))
    assert torch.equal(top_p_filter(p, 1e-9), torch.tensor([[0.0, 0.5, 0.0, 0.0]]))  # never empty
    assert top_p_filter(p, 1.0) is p


def test_order_and_counts_with_zero_counts():
    counts = [2, 0, 3, 1]
    sp = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=6)
    out = engine(small_model()).generate(PROMPTS, counts, sp, gen(0))
    assert [r.prompt_index for r in out] == [0, 0, 2, 2, 2, 3]
    for r in out:
        assert r.prompt_ids == PROMPTS[r.prompt_index]
        assert 1 <= len(r.response_ids) <= 6 and len(r.logprobs) == len(r.response_ids)
        assert all(lp <= 0.0 for lp in r.logprobs)
    assert len(engine(small_model()).generate(PROMPTS, 2, sp, gen(0))) == 8
    assert engine(small_model()).generate(PROMPTS, 0, sp, gen(0)) == []
    empty = engine(small_model()).generate(PROMPTS, [1, 0, 0, 2], SamplingParams(max_new_tokens=0), gen(0))
    assert [(r.prompt_index, r.response_ids, r.logprobs, r.finished) for r in empty] == [
        (0, [], [], False), (3, [], [], False), (3, [], [], False)]


def test_same_generator_state_gives_identical_rollouts():
    eng, sp = engine(small_model()), SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=8)
    a = eng.generate(PROMPTS, [3, 1, 2, 2], sp, gen(7))
    b = eng.generate(PROMPTS, [3, 1, 2, 2], sp, gen(7))
    c = eng.generate(PROMPTS, [3, 1, 2, 2], sp, gen(8))
    def key(rs):
        return [(r.response_ids, r.logprobs, r.finished) for r in rs]

    assert key(a) == key(b)
    assert [r.response_ids for r in a] != [r.response_ids for r in c]


def test_eos_stop_keeps_eos_and_its_logprob():
    sp = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=5)
    out = engine(eos_biased_model(+60.0)).generate(PROMPTS, 2, sp, gen(0))
    for r in out:
        assert r.response_ids == [EOS] and r.finished
        assert len(r.logprobs) == 1 and -1e-3 < r.logprobs[0] <= 0.0


def test_max_new_tokens_stop():
    sp = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=7)
    out = engine(eos_biased_model(-60.0)).generate(PROMPTS, 2, sp, gen(0))
    for r in out:
        assert len(r.response_ids) == 7 and not r.finished and EOS not in r.response_ids


def test_any_of_several_stop_ids_ends_a_response():
    """A chat model ends a turn with a token other than EOS (<|im_end|>): every stop id counts."""
    sp = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=6)
    model = small_model()
    plain = HFSampler(model, eos_id=EOS, pad_id=PAD).generate(PROMPTS, 8, sp, gen(3))
    stops = sorted({r.response_ids[0] for r in plain if r.response_ids} - {EOS})[:3]
    assert stops, "need sampled first tokens other than EOS"
    multi = HFSampler(model, eos_id=[EOS, *stops], pad_id=PAD).generate(PROMPTS, 8, sp, gen(3))
    for r in multi:
        ends = [i for i, t in enumerate(r.response_ids) if t in (EOS, *stops)]
        assert r.finished == bool(ends)
        if ends:  # stops at the first stop id, which is kept as the last token
            assert ends[0] == len(r.response_ids) - 1
    assert any(r.response_ids[-1] in stops for r in multi if r.response_ids)


def test_mixed_stops_invariants():
    """EOS probability ~1/2 per step: rows finish at different steps in one batch."""
    sp = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=4)
    out = engine(eos_biased_model(3.0)).generate(PROMPTS, 8, sp, gen(1))
    lengths = {len(r.response_ids) for r in out}
    assert len(lengths) >= 3 and any(r.finished for r in out) and not all(r.finished for r in out)
    for r in out:
        assert r.finished == (r.response_ids[-1] == EOS)
        assert EOS not in r.response_ids[:-1]
        if not r.finished:
            assert len(r.response_ids) == 4


def no_cache_logprobs(model, prompt, response, temperature):
    """Recompute log p(response_k | prompt + response_<k) one unpadded forward per token."""
    out = []
    with torch.no_grad():
        for k, tok in enumerate(response):
            ctx = torch.tensor([prompt + response[:k]])
            z = model(input_ids=ctx).logits[0, -1].float() / temperature
            out.append((z.log_softmax(-1)[tok]).item())
    return out


def test_kv_cache_matches_no_cache_recomputation():
    model = small_model()
    sp = SamplingParams(temperature=0.8, top_p=0.7, max_new_tokens=5)
    out = engine(model).generate(PROMPTS, [2, 1, 3, 1], sp, gen(3))  # shared prefills
    for r in out:
        ref = no_cache_logprobs(model, r.prompt_ids, r.response_ids, 0.8)
        assert r.logprobs == pytest.approx(ref, abs=1e-4)


def test_compacting_finished_rows_changes_no_token():
    """The shipped tiny policy on its arithmetic prompts: answers of 2-5 tokens, so rows finish
    at different steps. Dropping finished rows from the forward batch (after every finish, at
    a quarter, never) samples the same tokens from the same generator, and the log-probs still
    match an uncached recomputation (a wrongly re-indexed cache would condition a row on
    another row's prompt and answer)."""
    from trainer.embedded.model import load_policy
    from trainer.embedded.presets import PRESETS
    from trainer.tasks import make_task
    from trainer.tasks.tokenizer import CharTokenizer

    tok = CharTokenizer.load(PRESETS["tiny"])
    task = make_task("arithmetic", tokenizer=tok, benchmark_size=8)
    prompts = [task.encode_prompt(p) for p in task.train_problems(0, 6, 0)]
    model = load_policy(PRESETS["tiny"])
    sp = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=8)
    runs = {c: HFSampler(model, eos_id=tok.eos_id, pad_id=tok.pad_id, compact_at=c).generate(prompts, 4, sp, gen(7))
            for c in (1e-9, 0.25, 2.0)}
    never = runs[2.0]
    assert len({len(r.response_ids) for r in never}) >= 3  # the batch really shrinks mid-call
    for c in (1e-9, 0.25):
        assert [(r.prompt_index, r.response_ids, r.finished) for r in runs[c]] == \
            [(r.prompt_index, r.response_ids, r.finished) for r in never]
        assert [lp for r in runs[c] for lp in r.logprobs] == pytest.approx([lp for r in never for lp in r.logprobs], abs=1e-5)
    for r in runs[1e-9]:
        assert r.logprobs == pytest.approx(no_cache_logprobs(model, r.prompt_ids, r.response_ids, 1.0), abs=1e-4)


def test_live_rows_waits_for_a_quarter_of_the_batch():
    done = torch.tensor([True, False, False, False, True, False, False, False])
    assert live_rows(done, torch.arange(8), 0.25).tolist() == [1, 2, 3, 5, 6, 7]  # 2 of 8 finished
    assert live_rows(done, torch.arange(8), 0.3) is None  # 2 of 8 < 0.3
    live = torch.tensor([1, 2, 3, 4])  # the forward batch after an earlier compaction
    assert live_rows(done, live, 0.25).tolist() == [0, 1, 2]  # row 4 finished: 1 of 4
    assert live_rows(torch.ones(8, dtype=torch.bool), torch.arange(8), 0.25) is None  # all done: the loop ends
    assert live_rows(done, torch.arange(8), 2.0) is None  # > 1: never


def greedy_no_cache(model, prompt, steps):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            tok = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            ids.append(tok)
            if tok == EOS:
                break
    return ids[len(prompt):]


def test_tiny_top_p_is_greedy_and_chunking_preserves_it():
    model = small_model(seed=1)
    sp = SamplingParams(temperature=1.0, top_p=1e-6, max_new_tokens=6)
    out = engine(model).generate(PROMPTS, [2, 1, 1, 2], sp, gen(0))
    for r in out:
        assert r.response_ids == greedy_no_cache(model, r.prompt_ids, 6)
    chunked = engine(model, max_batch_rows=4).generate(PROMPTS, [2, 1, 1, 2], sp, gen(5))
    assert [(r.prompt_index, r.response_ids) for r in chunked] == [(r.prompt_index, r.response_ids) for r in out]
    def flat(rs):
        return [lp for r in rs for lp in r.logprobs]

    assert flat(chunked) == pytest.approx(flat(out), abs=1e-5)


def test_temperature_zero_is_greedy():
    model = small_model(seed=1)
    out = engine(model).generate(PROMPTS, 1, SamplingParams(temperature=0.0, max_new_tokens=6), None)
    assert [r.response_ids for r in out] == [greedy_no_cache(model, p, 6) for p in PROMPTS]


def test_mode_restored_and_weights_shared():
    model = small_model()
    eng, sp = engine(model), SamplingParams(max_new_tokens=3)
    model.train()
    model.model.layers[0].eval()  # a frozen block keeps its own mode
    eng.generate(PROMPTS, 1, sp, gen(0))
    assert model.training and model.model.layers[1].training and not model.model.layers[0].training
    model.eval()
    eng.generate(PROMPTS, 1, sp, gen(0))
    assert not model.training
    other = small_model(seed=3)
    eng.sync_weights(other)
    assert eng.model is other


def test_empty_prompt_rejected():
    with pytest.raises(ValueError):
        engine(small_model()).generate([[]], 1, SamplingParams(), gen(0))


def test_registry():
    assert set(SAMPLER_NAMES) == {"hf", "vllm"} == set(get_args(RolloutConfig.model_fields["sampler"].annotation))  # the config's sampler values
    same = dict(stop_ids=[EOS], pad_id=PAD, model=small_model(), model_path="/m", seed=0, max_model_len=64)
    built = make_sampler("hf", **same)
    assert isinstance(built, HFSampler) and built.eos_id == EOS and built.pad_id == PAD
    with pytest.raises(ValueError, match="unknown sampler"):
        make_sampler("nope", **same)
    with pytest.raises(ValueError, match="pass model="):
        make_sampler("hf", **{**same, "model": None})
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"pip install 'aero-lab\[vllm\]'"):
            make_sampler("vllm", **same)  # the same keywords as the hf sampler


def test_throughput_print():
    """Sanity print only (the machine is shared): tokens/s on the ~1M TINY_SHAPE policy."""
    model = build_model(tiny_qwen2_config(V, BOS, EOS, PAD), seed=0)
    eng = engine(model)
    prompt = [BOS, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    for rows, new in ((256, 12), (16, 2)):
        sp = SamplingParams(temperature=1.0, max_new_tokens=new)
        eng.generate([prompt], rows, sp, gen(0))  # warm-up
        reps, t0 = 2, time.perf_counter()
        toks = sum(r.length for _ in range(reps) for r in eng.generate([prompt], rows, sp, gen(1)))
        dt = time.perf_counter() - t0
        print(f"embedded engine {rows}x{new}: {toks / dt:.0f} tokens/s, {1e3 * dt / reps:.1f} ms/call "
              f"({torch.get_num_threads()} threads)")
        assert toks > 0
