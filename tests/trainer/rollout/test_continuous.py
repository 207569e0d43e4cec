"""Per-row keyed sampling (trainer/rollout/keyed.py) and the continuous batch
(trainer/rollout/continuous.py): a row's tokens depend on its key, not on the batch around it, so
rows that join a running batch sample what separate generate calls with the same keys sample."""

import pytest
import torch

from tests.trainer.rollout.test_attention import PROMPTS as GQA_PROMPTS
from tests.trainer.rollout.test_attention import gqa_model
from tests.trainer.rollout.test_embedded import EOS, PAD, PROMPTS, eos_biased_model, small_model
from trainer.rollout.base import SamplingParams
from trainer.rollout.continuous import Block
from trainer.rollout.embedded import HFSampler
from trainer.rollout.keyed import keyed_uniform, pick, row_key, sample_keyed, splitmix64, splitmix64_ref

SAMPLINGS = {"T1": SamplingParams(1.0, 1.0, 8), "top_p": SamplingParams(0.8, 0.7, 8),
             "greedy": SamplingParams(0.0, 1.0, 8)}


def test_splitmix64_wraps_as_uint64():
    """The int64 tensor version is bit-for-bit the unsigned reference (products wrap, shifts are logical)."""
    xs = [0, 1, 2, 12345, -1, -(2**63), 2**63 - 1, 0x123456789ABCDEF]
    got = splitmix64(torch.tensor(xs, dtype=torch.int64)).tolist()
    assert [g & (2**64 - 1) for g in got] == [splitmix64_ref(x & (2**64 - 1)) for x in xs]
    u = keyed_uniform(torch.tensor(xs, dtype=torch.int64), torch.arange(len(xs)))
    assert u.dtype == torch.float64 and bool(((u >= 0) & (u < 1)).all()) and len(set(u.tolist())) == len(xs)


def test_keyed_sampling_is_the_distribution_and_never_a_filtered_token():
    """Inverse-CDF on keyed uniforms: frequencies match the (top-p filtered) probabilities, a
    zero-probability token is never drawn, and log-probs are of the full softmax at T."""
    torch.manual_seed(0)
    logits = torch.randn(1, 6) * 2
    sp = SamplingParams(0.7, 0.8, 1)
    N = 20_000
    keys = torch.tensor([row_key(3, 0, i) for i in range(N)], dtype=torch.int64)
    tok, lp = sample_keyed(logits.expand(N, -1), sp, keys, torch.zeros(N, dtype=torch.long))
    z = logits[0] / 0.7
    p = torch.softmax(z, -1)
    order = p.argsort(descending=True)
    kept = order[:int(((p[order].cumsum(0) - p[order]) < 0.8).sum())]
    q = torch.zeros(6)
    q[kept] = p[kept] / p[kept].sum()
    freq = torch.bincount(tok, minlength=6).float() / N
    assert (freq[q == 0] == 0).all()
    assert freq.tolist() == pytest.approx(q.tolist(), abs=0.015)
    assert lp.tolist() == pytest.approx(torch.log_softmax(z, -1)[tok].tolist(), abs=1e-5)


def test_a_rows_tokens_do_not_depend_on_its_batch():
    """The same keys give the same tokens whatever the rows around them, the chunking or the decode."""
    model, sp = small_model(), SAMPLINGS["T1"]
    keys = [row_key(11, p, i) for p in range(len(PROMPTS)) for i in range(3)]
    base = HFSampler(model, EOS, PAD).generate(PROMPTS, 3, sp, keys=keys)
    for kw in ({"decode": "static"}, {"decode": "graphs"}, {"max_batch_rows": 4}, {"decode": "static", "sync_every": 3}):
        other = HFSampler(model, EOS, PAD, **kw).generate(PROMPTS, 3, sp, keys=keys)
        assert [r.response_ids for r in other] == [r.response_ids for r in base], kw
    # one prompt alone, the same keys: the same rows
    alone = HFSampler(model, EOS, PAD).generate(PROMPTS[1:2], 3, sp, keys=keys[3:6])
    assert [r.response_ids for r in alone] == [r.response_ids for r in base[3:6]]
    # another key, another answer somewhere (a stream of 12 rows x 8 tokens: not all equal)
    moved = HFSampler(model, EOS, PAD).generate(PROMPTS, 3, sp, keys=[k + 1 for k in keys])
    assert [r.response_ids for r in moved] != [r.response_ids for r in base]
    with pytest.raises(ValueError, match="keys has 2 entries for 12 rows"):
        HFSampler(model, EOS, PAD).generate(PROMPTS, 3, sp, keys=keys[:2])


def rounds_by_calls(engine, prompts, sp, plan):
    """The reference: plan(block rollouts) -> next blocks, run as one generate call per wave."""
    first = [Block(p, tuple(row_key(5, p, i) for i in range(3))) for p in range(len(prompts))]
    out, wave = [], first
    while wave:
        nxt = []
        for blk in wave:
            got = engine.generate([prompts[blk.prompt]], [len(blk.keys)], sp, keys=list(blk.keys))
            for r in got:
                r.prompt_index, r.round = blk.prompt, blk.round
            out.append(got)
            nxt += plan(got)
        wave = nxt
    return out


def chain(limit=3):
    """A react that asks for 2 more rows of a prompt unless its block's answer lengths say stop
    (a rule of the outcome, as AERO's rescue is), for up to ``limit`` rounds."""
    def plan(got):
        p, rnd = got[0].prompt_index, got[0].round
        if rnd >= limit or (sum(len(r.response_ids) for r in got) + p) % 3 == 0:
            return []
        return [Block(p, tuple(row_key(5, p, 3 + 2 * rnd + i) for i in range(2)), rnd + 1)]
    return plan


@pytest.mark.parametrize("sampling", list(SAMPLINGS))
@pytest.mark.parametrize("option", [{}, {"max_batch_rows": 5}, {"sync_every": 3}, {"compact_at": 2.0},
                                    {"compact_at": 1e-9}, {"decode": "graphs"},
                                    {"decode": "graphs", "max_batch_rows": 5, "compact_at": 0.5}])
def test_the_continuous_batch_samples_what_separate_calls_sample(sampling, option):
    """Blocks asked for mid-decode join the batch; every rollout equals the one a separate
    generate call with its key samples (tokens, finish; log-probs to float rounding), and the
    rollouts come back in the order the blocks were asked for."""
    model, sp = eos_biased_model(1.5), SAMPLINGS[sampling]
    eng = HFSampler(model, EOS, PAD, **{"decode": "static", **option})
    calls, asked = rounds_by_calls(HFSampler(model, EOS, PAD), PROMPTS, sp, chain()), []
    first = [Block(p, tuple(row_key(5, p, i) for i in range(3))) for p in range(len(PROMPTS))]

    def react(bid, got):
        asked.append([r.round for r in got])
        return chain()(got)

    out = eng.stream(PROMPTS, first, sp, react)
    by_key = {(r.prompt_index, r.round, tuple(r.response_ids)) for blk in calls for r in blk}
    assert {(r.prompt_index, r.round, tuple(r.response_ids)) for r in out} == by_key
    assert len(out) == sum(len(b) for b in calls)
    assert max(r.round for r in out) >= 1, "no block joined: the test does not test joining"
    ref = {(r.prompt_index, r.round, i): r for blk in calls for i, r in enumerate(blk)}
    seen: dict[tuple, int] = {}
    for r in out:
        i = seen.setdefault((r.prompt_index, r.round), 0)
        seen[(r.prompt_index, r.round)] += 1
        want = ref[(r.prompt_index, r.round, i)]
        assert (r.response_ids, r.finished) == (want.response_ids, want.finished)
        assert r.logprobs == pytest.approx(want.logprobs, abs=1e-5)
    assert len(asked) == len(calls)


def test_rows_join_while_others_decode():
    """Answers of different lengths: a later round's block finishes before the last first-round
    block does, so its rows joined while first-round rows were decoding (the point of the batch)."""
    model, sp = eos_biased_model(1.0), SamplingParams(1.0, 1.0, 24)
    eng = HFSampler(model, EOS, PAD, decode="static")
    order = []

    def react(bid, got):
        order.append((got[0].prompt_index, got[0].round))
        return chain(limit=2)(got)

    first = [Block(p, tuple(row_key(9, p, i) for i in range(3))) for p in range(len(PROMPTS))]
    eng.stream(PROMPTS, first, sp, react)
    rounds = [rnd for _, rnd in order]
    last_first = max(i for i, rnd in enumerate(rounds) if rnd == 0)
    assert any(rnd > 0 for rnd in rounds[:last_first]), f"every first block finished before a join: {order}"


def test_grouped_query_models_stream_too():
    model = gqa_model()
    sp = SAMPLINGS["top_p"]
    keys = [row_key(1, p, i) for p in range(len(GQA_PROMPTS)) for i in range(2)]
    ref = HFSampler(model, EOS, PAD).generate(GQA_PROMPTS, 2, sp, keys=keys)
    first = [Block(p, tuple(keys[2 * p:2 * p + 2])) for p in range(len(GQA_PROMPTS))]
    out = HFSampler(model, EOS, PAD, decode="static").stream(GQA_PROMPTS, first, sp, lambda bid, got: [])
    assert [r.response_ids for r in out] == [r.response_ids for r in ref]


def test_bad_streams_are_refused():
    eng = HFSampler(small_model(), EOS, PAD)
    assert eng.stream(PROMPTS, [Block(0, ())], SAMPLINGS["T1"], lambda bid, got: []) == []
    with pytest.raises(ValueError, match="non-empty"):
        eng.stream([[]], [Block(0, (1,))], SAMPLINGS["T1"], lambda bid, got: [])


def test_a_rounded_cumulative_sum_never_picks_a_filtered_token():
    """A tree-scanned cumulative sum (CUDA's) may rise or fall across filtered zeros; a search
    landing on a zero takes the last kept token before it, or the most likely one."""
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.0, 0.5], [0.0, 0.0, 0.0, 1.0, 0.0]])
    cdf = torch.tensor([[0.0, 0.5, 0.5000001, 0.5000002, 1.0], [1e-7, 1e-7, 2e-7, 1.0, 1.0]])
    x = torch.tensor([[0.50000005], [0.5e-7]])
    assert pick(probs, cdf, x).tolist() == [2, 0]  # the bare search lands on zeros (a CPU sum never looks so)
    assert pick(probs, cdf, x, sequential=False).tolist() == [1, 3]
    assert pick(probs, cdf, torch.tensor([[0.2], [0.9]]), sequential=False).tolist() == [1, 3]
    # the CPU's own sum: flat across zeros, the search lands on positive tokens only
    p = torch.softmax(torch.randn(64, 500), -1) * (torch.rand(64, 500) > 0.7)
    for _ in range(5):
        got = pick(p, p.cumsum(-1), torch.rand(64, 1) * p.sum(-1, keepdim=True) * 0.999999)
        assert bool((p.gather(-1, got[:, None]) > 0).all())


def test_non_finite_logits_raise_on_every_per_row_path():
    model = small_model()
    with torch.no_grad():
        model.lm_head.weight[3] = float("nan")
    sp = SAMPLINGS["T1"]
    keys = [row_key(0, p, i) for p in range(len(PROMPTS)) for i in range(2)]
    for kw in ({}, {"decode": "static"}):
        with pytest.raises(RuntimeError, match="probability tensor"):
            HFSampler(model, EOS, PAD, **kw).generate(PROMPTS, 2, sp, keys=keys)
    with pytest.raises(RuntimeError, match="probability tensor"):
        HFSampler(model, EOS, PAD).stream(PROMPTS, [Block(0, (1, 2))], sp, lambda bid, got: [])


def test_graphs_run_the_stream_on_a_few_fixed_shapes(monkeypatch):
    """decode=graphs: every forward of the stream is at a size of the bucket ladder (what a CUDA
    graph per size replays; on the CPU the same fixed-shape step runs eagerly), attending to
    every slot; the rows joining and leaving do not add shapes."""
    from trainer.rollout import continuous
    from trainer.rollout.static_decode import bucket_sizes

    shapes = []
    forward = continuous.Stream.forward

    def record(self, b, keep):
        shapes.append((b, keep.shape[1]))
        return forward(self, b, keep)

    monkeypatch.setattr(continuous.Stream, "forward", record)
    model, sp = eos_biased_model(1.0), SamplingParams(1.0, 1.0, 24)
    first = [Block(p, tuple(row_key(9, p, i) for i in range(5))) for p in range(len(PROMPTS))]
    HFSampler(model, EOS, PAD, decode="graphs").stream(PROMPTS, first, sp, lambda bid, got: chain(limit=2)(got))
    sizes = set(bucket_sizes(20, 0.75, 8))
    assert {b for b, _ in shapes} <= sizes and len({b for b, _ in shapes}) >= 2
    assert len({k for _, k in shapes}) == 1  # the whole capacity, every step


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_the_stream_on_cuda_graphs_samples_what_separate_calls_sample_on_a_gpu():
    """Runs only where CUDA is present (not on the project's CPU test machine): float32 on the
    GPU, so the logits of both paths agree to rounding and the tokens should match."""
    model, sp = eos_biased_model(1.0).cuda(), SamplingParams(1.0, 0.9, 12)
    calls = rounds_by_calls(HFSampler(model, EOS, PAD), PROMPTS, sp, chain())
    first = [Block(p, tuple(row_key(5, p, i) for i in range(3))) for p in range(len(PROMPTS))]
    out = HFSampler(model, EOS, PAD, decode="graphs").stream(PROMPTS, first, sp, lambda bid, got: chain()(got))
    want = sorted((r.prompt_index, r.round, tuple(r.response_ids)) for blk in calls for r in blk)
    assert sorted((r.prompt_index, r.round, tuple(r.response_ids)) for r in out) == want
