"""Every registered method's step (trainer/methods/) on the tiny preset generates the same rollouts
with the static decode (trainer/rollout/static_decode.py) as with the dynamic one: every engine
call of the step (AERO's exploration and each rescue round, DAPO's extra batches, ...), the rewards
scored from their text, the rows the step trains and their advantages, and the sampling RNG and
method state it hands to the next step."""

import numpy as np
import pytest
import torch

from trainer.config import parse_run_config
from trainer.embedded.collect import StepContext, collect
from trainer.embedded.presets import load_setup, stop_token_ids
from trainer.methods.spec import get_method, specs
from trainer.rollout.base import SamplingParams
from trainer.rollout.embedded import HFSampler

CASES = {s.name: {} for s in specs()}
CASES["aero sequential rounds"] = {"method": "aero", "aero": {"rounds_per_call": 1}}  # one engine call per round
CASES["aero chunked, top-p"] = {"method": "aero", "top_p": 0.9, "temperature": 0.8}  # 20-row chunks below


def config(case: str):
    over = dict(CASES[case])
    method = over.pop("method", case)
    sections = {s.name for s in get_method(method).sections}
    data = {"preset": "tiny", "method": method, "batch_prompts": 8, "n_total": 8, "seed": 3, **over}
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


def two_steps(cfg, setup, decode: str, max_batch_rows: int | None):
    """Two steps of the method's collection with the engine on ``decode``: per step the
    generated rollouts, the trained rows' indices into them, the advantages, the calls."""
    ctx = step_context(cfg, setup, max_batch_rows=max_batch_rows, decode=decode)
    steps, data_pos = [], 0
    for _ in range(2):
        c = collect(ctx, data_pos)
        data_pos += c.prompts_used
        index = {id(r): i for i, r in enumerate(c.generated)}
        steps.append(dict(generated=c.generated, train=[index[id(r)] for r in c.train], adv=c.advantages,
                          calls=c.gen_calls, stats=c.stats))
    return steps, ctx.gen.get_state(), ctx.method_state


@pytest.mark.parametrize("case", list(CASES))
def test_static_decode_gives_every_method_the_same_rollouts(case):
    cfg = config(case)
    setup = load_setup(cfg)
    chunk = 20 if "chunked" in case else None
    dyn, gen_d, state_d = two_steps(cfg, setup, "dynamic", chunk)
    sta, gen_s, state_s = two_steps(cfg, setup, "static", chunk)
    for a, b in zip(dyn, sta):
        key = [(r.prompt_index, r.round, r.response_ids, r.finished, r.reward) for r in a["generated"]]
        assert key == [(r.prompt_index, r.round, r.response_ids, r.finished, r.reward) for r in b["generated"]]
        assert [lp for r in a["generated"] for lp in r.logprobs] == \
            pytest.approx([lp for r in b["generated"] for lp in r.logprobs], abs=1e-5)
        assert a["train"] == b["train"] and a["calls"] == b["calls"]
        assert torch.equal(a["adv"], b["adv"])
    assert torch.equal(gen_d, gen_s) and state_d == state_s
    lengths = {r.length for s in dyn for r in s["generated"]}
    assert len(lengths) >= 3  # rows finish at different steps
    strategies = get_method(cfg.method).aero
    if strategies is not None and strategies.s1:
        assert sum(s["stats"]["rescue/calls"] for s in dyn) >= 1  # rescue rounds ran
    if case == "aero sequential rounds":
        assert max(s["calls"] for s in dyn) >= 3  # exploration + at least two rescue calls


def test_config_field_reaches_the_engine_and_verl_refuses_it():
    from trainer.config import ConfigError

    assert parse_run_config({}).rollout_decode == "dynamic"
    setup = load_setup(parse_run_config({"preset": "tiny", "rollout_decode": "static"}))
    assert setup.sampler.decode == "static"
    with pytest.raises(ConfigError, match="rollout_decode"):
        parse_run_config({"engine": "verl", "preset": None, "model_path": "/m", "task": "math",
                          "train_data": "/d.jsonl", "rollout_decode": "graphs"})


def test_a_training_run_logs_the_same_metrics_on_either_decode(tmp_path):
    """Two AERO steps through the loop (generation, update, metrics): every metric but the
    timings is the same with rollout_decode=static (here bit for bit)."""
    from trainer.engines import run_training
    from trainer.sinks import MemorySink

    steps = {}
    for decode in ("dynamic", "static"):
        sink = MemorySink()
        cfg = parse_run_config({"preset": "tiny", "method": "aero", "steps": 2, "batch_prompts": 8, "eval_every": 0,
                                "eval_problems": 4, "eval_n": 2, "checkpoint_every": 0, "rollout_decode": decode})
        run_training(cfg, tmp_path / decode, sink)
        steps[decode] = sink.steps

    def untimed(m):
        return {k: v for k, v in m.items() if not (k.startswith(("time/", "system/")) or k.endswith("_s"))}

    assert sorted(steps["dynamic"]) == sorted(steps["static"]) == [1, 2]
    for s in (1, 2):
        # counts exactly; losses and log-prob statistics to float rounding (log-probs may differ in the last bit)
        assert untimed(steps["static"][s]) == pytest.approx(untimed(steps["dynamic"][s]), rel=1e-5, abs=1e-6)
