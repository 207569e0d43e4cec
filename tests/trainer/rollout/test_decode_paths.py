"""Every decode path of the hf sampler samples what its reference samples, the dynamic loop of
trainer/rollout/embedded.py: the static decode and its graphs step (trainer/rollout/static_decode.py,
every row of a call joining the slot-cache core at once), from the run's generator or from per-row
keys, and the continuous batch (trainer/rollout/continuous.py, rows joining the same core as their
blocks are asked for) against separate calls with the same keys. The same tokens and finishes,
log-probs to float rounding, the generator left where the dynamic loop leaves it; then two steps of
every method, and a training run, on each path.

CUDA-only: the two ``*_on_a_gpu`` tests (graphs captured and replayed, trainer/rollout/decode_graphs.py).
On the CPU the graphs path runs the same fixed-shape step eagerly, which every other graphs case here
tests; the core's helpers have their unit tests in test_static_decode.py and test_keyed.py."""

import copy

import numpy as np
import pytest
import torch

from tests.trainer.rollout.test_attention import PROMPTS as GQA_PROMPTS
from tests.trainer.rollout.test_attention import gqa_model
from tests.trainer.rollout.test_embedded import EOS, PAD, PROMPTS, eos_biased_model, no_cache_logprobs, small_model
from trainer.spec.config import ConfigError, parse_run_config
from trainer.embedded.collect import StepContext, collect
from trainer.embedded.presets import load_setup, stop_token_ids
from trainer.methods.spec import get_method, specs
from trainer.rollout.attention import use_packed_gqa
from trainer.rollout.base import SamplingParams
from trainer.rollout.continuous import Block
from trainer.rollout.embedded import HFSampler
from trainer.rollout.keyed import row_key
from trainer.rollout.static_decode import Batch, bucket_sizes

SAMPLINGS = {"T1": SamplingParams(1.0, 1.0, 8), "top_p": SamplingParams(0.8, 0.7, 8),
             "greedy": SamplingParams(0.0, 1.0, 8)}
OPTIONS = {"default": {}, "sync_every_3": {"sync_every": 3}, "shrink_every_finish": {"compact_at": 1e-9},
           "never_shrink": {"compact_at": 2.0}, "chunks_of_5": {"max_batch_rows": 5}}
COUNTS = [3, 1, 2, 4]


def run(model, sp, counts, decode="dynamic", prompts=PROMPTS, eos=EOS, pad=PAD, seed=7, keys=None, **kw):
    """(rollouts, the generator's state afterwards)."""
    if decode == "dynamic":
        kw.pop("sync_every", None)
    g = torch.Generator().manual_seed(seed)
    out = HFSampler(model, eos, pad, decode=decode, **kw).generate(prompts, counts, sp, g, keys=keys)
    return out, g.get_state()


def row_keys(counts, step_key=11):
    return [row_key(step_key, p, i) for p, n in enumerate(counts) for i in range(n)]


def assert_same(a, b, tol=1e-5):
    assert [(r.prompt_index, r.response_ids, r.finished) for r in a] == [(r.prompt_index, r.response_ids, r.finished)
                                                                         for r in b]
    assert [lp for r in a for lp in r.logprobs] == pytest.approx([lp for r in b for lp in r.logprobs], abs=tol)


# --- generate: the static decode and its graphs step against the dynamic loop --------------------


@pytest.mark.parametrize("decode", ["static", "graphs"])
@pytest.mark.parametrize("rng", ["stream", "per-row"])
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("sampling", list(SAMPLINGS))
@pytest.mark.parametrize("eos_bias", [None, 3.0])
def test_generate_samples_what_the_dynamic_loop_samples(decode, rng, option, sampling, eos_bias):
    """eos_bias 3: EOS ~1/2 per step, rows finish at different steps; None: most rows reach
    max_new_tokens. Greedy, top-p, a host read every 3 steps, shrinking after every finish or
    never, 5-row chunks, from the generator or per-row keys: tokens, finishes and the generator's
    state equal the dynamic loop's."""
    model = small_model() if eos_bias is None else eos_biased_model(eos_bias)
    sp, kw = SAMPLINGS[sampling], OPTIONS[option]
    keys = row_keys(COUNTS) if rng == "per-row" else None
    a, state_a = run(model, sp, COUNTS, keys=keys, **kw)
    b, state_b = run(model, sp, COUNTS, decode=decode, keys=keys, **kw)
    assert_same(a, b)
    assert torch.equal(state_a, state_b)
    if eos_bias is not None and sampling == "T1":
        assert len({r.length for r in a}) >= 3  # the batch really finishes over several steps


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


@pytest.mark.parametrize("decode", ["static", "graphs"])
def test_eos_and_max_new_tokens_stops(decode):
    sp = SamplingParams(1.0, 1.0, 5)
    out, _ = run(eos_biased_model(+60.0), sp, 2, decode=decode)
    assert all(r.response_ids == [EOS] and r.finished and -1e-3 < r.logprobs[0] <= 0 for r in out)
    out, _ = run(eos_biased_model(-60.0), sp, 2, decode=decode, sync_every=2)
    assert all(len(r.response_ids) == 5 and not r.finished and EOS not in r.response_ids for r in out)


@pytest.mark.parametrize("decode", ["static", "graphs"])
def test_several_stop_ids_and_uncached_logprobs(decode):
    model, sp = small_model(), SamplingParams(1.0, 1.0, 6)
    plain, _ = run(model, sp, 8, seed=3)
    stops = [EOS, *sorted({r.response_ids[0] for r in plain if r.response_ids} - {EOS})[:3]]
    a, _ = run(model, sp, 8, eos=stops, seed=3)
    b, _ = run(model, sp, 8, decode=decode, eos=stops, seed=3, compact_at=1e-9)
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


# --- the continuous batch against separate calls ---------------------------------------------------


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


# --- every path: attention kinds, non-finite logits, fixed shapes, CUDA graphs ------------------------


@pytest.mark.parametrize("path", ["static", "graphs", "continuous"])
@pytest.mark.parametrize("attn", ["sdpa", "packed", "eager"])
def test_grouped_query_models_on_each_attention(attn, path):
    stock = gqa_model(attn="eager" if attn == "eager" else "sdpa")
    model = copy.deepcopy(stock)
    if attn == "packed":
        assert use_packed_gqa(model)
    if path != "continuous":
        sp = SamplingParams(1.0, 0.9, 12)
        a, _ = run(stock, sp, [3, 2, 4], prompts=GQA_PROMPTS, eos=[2, 7], pad=0)
        b, _ = run(model, sp, [3, 2, 4], decode=path, prompts=GQA_PROMPTS, eos=[2, 7], pad=0, sync_every=4)
        assert_same(a, b)
        return
    sp = SAMPLINGS["top_p"]
    keys = [row_key(1, p, i) for p in range(len(GQA_PROMPTS)) for i in range(2)]
    ref = HFSampler(stock, EOS, PAD).generate(GQA_PROMPTS, 2, sp, keys=keys)
    first = [Block(p, tuple(keys[2 * p:2 * p + 2])) for p in range(len(GQA_PROMPTS))]
    out = HFSampler(model, EOS, PAD, decode="static").stream(GQA_PROMPTS, first, sp, lambda bid, got: [])
    assert [r.response_ids for r in out] == [r.response_ids for r in ref]


@pytest.mark.parametrize("path", ["dynamic", "static", "graphs", "dynamic per-row", "static per-row", "continuous"])
def test_non_finite_logits_raise_as_multinomial_does_on_every_path(path):
    model = small_model()
    with torch.no_grad():
        model.lm_head.weight[3] = float("nan")
    sp = SamplingParams(1.0, 1.0, 4)
    keys = [row_key(0, p, i) for p in range(len(PROMPTS)) for i in range(2)]
    with pytest.raises(RuntimeError, match="probability tensor.*nan"):
        if path == "continuous":
            HFSampler(model, EOS, PAD).stream(PROMPTS, [Block(0, (1, 2))], sp, lambda bid, got: [])
        else:
            run(model, sp, 2, decode=path.split()[0], keys=keys if "per-row" in path else None)


@pytest.mark.parametrize("path", ["static", "continuous"])
def test_graph_steps_stay_on_the_ladder_and_the_host_is_read_every_k_steps(path, monkeypatch):
    """decode=graphs: every decode forward is at a size of the bucket ladder (what a CUDA graph per
    size replays; on the CPU the same fixed-shape step runs eagerly), attending to every slot; the
    rows joining and leaving do not add shapes; the host is read once per sync_every steps."""
    shapes, reads = [], []
    forward, harvest = Batch.forward, Batch.harvest
    monkeypatch.setattr(Batch, "forward", lambda self, b, keep: shapes.append((b, keep.shape[1])) or
                        forward(self, b, keep))
    monkeypatch.setattr(Batch, "harvest", lambda self, on_row: reads.append(1) or harvest(self, on_row))
    if path == "static":
        sync = 4
        run(eos_biased_model(3.0), SamplingParams(1.0, 1.0, 12), 16, decode="graphs", sync_every=sync, compact_at=0.5)
        sizes = set(bucket_sizes(64, 0.5, 8))
    else:
        sync = 1  # the CPU's default
        first = [Block(p, tuple(row_key(9, p, i) for i in range(5))) for p in range(len(PROMPTS))]
        HFSampler(eos_biased_model(1.0), EOS, PAD, decode="graphs").stream(
            PROMPTS, first, SamplingParams(1.0, 1.0, 24), lambda bid, got: chain(limit=2)(got))
        sizes = set(bucket_sizes(20, 0.75, 8))
    assert {b for b, _ in shapes} <= sizes and len({b for b, _ in shapes}) >= 2
    assert len({k for _, k in shapes}) == 1  # the whole capacity, every step
    steps = len(shapes) + 1
    assert len(reads) <= -(-steps // sync)


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


# --- every method's step, and a training run, on each path -----------------------------------------

CASES = {s.name: {} for s in specs()}
CASES["aero sequential rounds"] = {"method": "aero", "aero": {"rounds_per_call": 1}}  # one engine call per round
CASES["aero chunked, top-p"] = {"method": "aero", "top_p": 0.9, "temperature": 0.8}  # 20-row chunks below
STREAM_CASES = {  # AERO's steps on one continuous batch (rollout.schedule=continuous)
    "aero": {"method": "aero"},
    "aero sequential rounds": {"method": "aero", "aero": {"rounds_per_call": 1}},
    "aero binding budget": {"method": "aero", "aero": {"k_max": 10, "rounds_per_call": 2}},
    "aero-s1s2 top-p": {"method": "aero-s1s2", "top_p": 0.9, "temperature": 0.8},
    "aero-mem": {"method": "aero-mem", "train_size": 64},
}
METHOD_CASES = ([("static", "stream", c) for c in CASES] + [("static", "per-row", c) for c in CASES] +
                [("continuous", "per-row", c) for c in STREAM_CASES])


def config(case: str, rng: str = "stream", schedule: str = "calls", cases=CASES):
    over = dict(cases[case])
    method = over.pop("method", case)
    sections = {s.name for s in get_method(method).sections}
    data = {"preset": "tiny", "method": method, "batch_prompts": 8, "n_total": 8, "seed": 3,
            "rollout": {"rng": rng, "schedule": schedule}, **over}
    if "aero" in sections:  # explore 4, so rescue rounds have budget: (8 - 4) x 8 prompts
        data["aero"] = {"n_explore": 4, "k_max": 3, **over.get("aero", {})}
    if get_method(method).needs.prompt_ids:
        data["train_size"] = 64
    return parse_run_config(data)


def step_context(cfg, setup, **engine_kw) -> StepContext:
    """A step's context over a fresh hf sampler on the setup's model, seeded from the config."""
    engine = HFSampler(setup.model, eos_id=stop_token_ids(setup.task, setup.model), pad_id=setup.task.tokenizer.pad_id,
                       **engine_kw)
    return StepContext(cfg=cfg, task=setup.task, sampler=engine,
                       sampling=SamplingParams(cfg.temperature, cfg.top_p, cfg.max_new_tokens),
                       gen=torch.Generator().manual_seed(cfg.seed), rng=np.random.default_rng(cfg.seed))


def two_steps(cfg, setup, decode: str, max_batch_rows: int | None = None):
    """Two steps of the method's collection with the engine on ``decode``: per step the generated
    rollouts, the trained rows' indices into them, the advantages, the calls, and the rows and
    trained rows keyed by their prompt group (in any order)."""
    ctx = step_context(cfg, setup, max_batch_rows=max_batch_rows, decode=decode)
    steps, data_pos = [], 0
    for _ in range(2):
        c = collect(ctx, data_pos)
        data_pos += c.prompts_used
        index = {id(r): i for i, r in enumerate(c.generated)}
        group = {id(r): data_pos - c.prompts_used + r.prompt_index for r in c.generated}
        rows = sorted((group[id(r)], r.round, tuple(r.response_ids), r.finished, r.reward) for r in c.generated)
        trained = sorted((group[id(r)], r.round, tuple(r.response_ids), round(float(a), 6))
                         for r, a in zip(c.train, c.advantages.tolist()))
        steps.append(dict(generated=c.generated, train=[index[id(r)] for r in c.train], adv=c.advantages,
                          calls=c.gen_calls, stats=c.stats, rows=rows, trained=trained))
    return steps, ctx.gen.get_state(), ctx.method_state


@pytest.fixture
def planners(monkeypatch):
    """Every RescueStream a step builds, to see which way it planned."""
    import trainer.core.rescue_stream as rs

    made, init = [], rs.RescueStream.__init__

    def record(self, *args, **kw):
        init(self, *args, **kw)
        made.append(self)

    monkeypatch.setattr(rs.RescueStream, "__init__", record)
    return made


@pytest.mark.parametrize("path,rng,case", METHOD_CASES, ids=[" ".join(c) for c in METHOD_CASES])
def test_every_method_trains_the_same_rollouts_on_each_path(path, rng, case, planners):
    """static: every engine call of the step (AERO's exploration and each rescue round, DAPO's
    extra batches, ...) generates what the dynamic loop generates, in order. continuous: AERO's
    steps on one continuous batch, in one engine call, train what separate calls train. Both:
    the rewards, the trained rows and their advantages, the sampling RNG and method state."""
    stream = path == "continuous"
    cases = STREAM_CASES if stream else CASES
    cfg = config(case, rng, cases=cases)
    setup = load_setup(cfg)
    chunk = 20 if "chunked" in case else None
    ref, gen_r, state_r = two_steps(cfg, setup, "static" if stream else "dynamic", chunk)
    got, gen_g, state_g = two_steps(config(case, rng, "continuous", cases) if stream else cfg, setup, "static", chunk)
    skip = ("time/", "rescue/calls")
    for a, b in zip(ref, got):
        assert a["rows"] == b["rows"]
        assert a["trained"] == b["trained"]
        if stream:
            assert b["calls"] == 1
            assert {k: v for k, v in a["stats"].items() if not k.startswith(skip)} == \
                pytest.approx({k: v for k, v in b["stats"].items() if not k.startswith(skip)})
            continue
        key = [(r.prompt_index, r.round, r.response_ids, r.finished, r.reward) for r in a["generated"]]
        assert key == [(r.prompt_index, r.round, r.response_ids, r.finished, r.reward) for r in b["generated"]]
        assert [lp for r in a["generated"] for lp in r.logprobs] == \
            pytest.approx([lp for r in b["generated"] for lp in r.logprobs], abs=1e-5)
        assert a["train"] == b["train"] and a["calls"] == b["calls"]
        assert torch.equal(a["adv"], b["adv"])
    assert torch.equal(gen_r, gen_g) and state_r == state_g
    strategies = get_method(cfg.method).aero
    if stream:
        if strategies.s1:
            assert max(s["calls"] for s in ref) >= 2  # the reference made rescue calls: rows did join the stream
            assert sum(s["stats"]["rescue/generated"] for s in got) > 0
        if case == "aero binding budget":  # rescue planned for the whole batch, as separate calls plan it
            assert any(p.global_windows for p in planners)
        if case == "aero":  # every window planned per prompt (the budget could not bind)
            assert all(p.global_windows == 0 and p.safe for p in planners) and any(p.rounds.max() for p in planners)
        return
    lengths = {r.length for s in ref for r in s["generated"]}
    assert len(lengths) >= 3  # rows finish at different steps
    if strategies is not None and strategies.s1:
        assert sum(s["stats"]["rescue/calls"] for s in ref) >= 1  # rescue rounds ran
    if case == "aero sequential rounds":
        assert max(s["calls"] for s in ref) >= 3  # exploration + at least two rescue calls


def test_per_row_sampling_is_its_own_sample():
    """rollout.rng=per-row samples other tokens than the stream from the same seed (a different
    random source, documented so), and its steps are still reproducible."""
    cfg = config("aero", "per-row")
    setup = load_setup(cfg)
    a, _, _ = two_steps(cfg, setup, "static")
    b, _, _ = two_steps(cfg, setup, "static")
    assert a[0]["rows"] == b[0]["rows"]
    c, _, _ = two_steps(config("aero", "stream"), setup, "static")
    assert c[0]["rows"] != a[0]["rows"]


def test_the_config_reaches_the_engine_and_refuses_what_cannot_run():
    assert parse_run_config({}).rollout.decode == "dynamic"
    setup = load_setup(parse_run_config({"preset": "tiny", "rollout": {"decode": "static"}}))
    assert setup.sampler.decode == "static"
    verl = {"engine": "verl", "preset": None, "model_path": "/m", "task": "math", "train_data": "/d.jsonl"}
    with pytest.raises(ConfigError, match="rollout.decode"):
        parse_run_config({**verl, "rollout": {"decode": "graphs"}})
    with pytest.raises(ConfigError, match="rollout.schedule: a continuous batch samples each rollout from its own key"):
        parse_run_config({"preset": "tiny", "method": "aero", "rollout": {"schedule": "continuous"}})
    with pytest.raises(ConfigError, match="rollout.rng: per-row keys are the hf sampler's"):
        parse_run_config({"preset": "tiny", "rollout": {"sampler": "vllm", "rng": "per-row"}})
    with pytest.raises(ConfigError, match="rollout.rng: verl's rollout servers"):
        parse_run_config({**verl, "rollout": {"rng": "per-row"}})
    assert parse_run_config({}).rollout.rng == "stream" and parse_run_config({}).rollout.schedule == "calls"


RUNS = {"static": ({"rollout": {"decode": "dynamic"}}, {"rollout": {"decode": "static"}}),
        "continuous": ({"rollout": {"rng": "per-row", "schedule": "calls"}, "checkpoint_every": 1},
                       {"rollout": {"rng": "per-row", "schedule": "continuous"}, "checkpoint_every": 1})}


@pytest.mark.parametrize("path", list(RUNS))
def test_a_training_run_logs_the_same_metrics_on_each_path(path, tmp_path):
    """Two AERO steps through the loop (generation, update, metrics; a checkpoint on the
    continuous batch): every metric but the timings is the same with rollout.decode=static (here
    bit for bit); on one continuous batch, one generate call per step and the gradient the same as
    the calls schedule's to float rounding."""
    from trainer.platform.run import run_training
    from trainer.platform.sinks import MemorySink

    steps = {}
    for name, over in zip(("ref", "path"), RUNS[path]):
        sink = MemorySink()
        cfg = parse_run_config({"preset": "tiny", "method": "aero", "steps": 2, "batch_prompts": 8, "eval_every": 0,
                                "eval_problems": 4, "eval_n": 2, "checkpoint_every": 0, **over})
        run_training(cfg, tmp_path / name, sink)
        steps[name] = sink.steps

    def untimed(m):
        return {k: v for k, v in m.items() if not (k.startswith(("time/", "system/")) or k.endswith("_s"))}

    assert sorted(steps["ref"]) == sorted(steps["path"]) == [1, 2]
    for s in (1, 2):
        got, ref = steps["path"][s], steps["ref"][s]
        if path == "static":  # counts exactly; losses and log-prob statistics to float rounding
            assert untimed(got) == pytest.approx(untimed(ref), rel=1e-5, abs=1e-6)
        else:
            assert got["rescue/calls"] == 0 and ref["rescue/calls"] >= 1
            assert got["train/grad_norm"] == pytest.approx(ref["train/grad_norm"], rel=1e-5)
            assert got["rollout/generated"] == ref["rollout/generated"]
