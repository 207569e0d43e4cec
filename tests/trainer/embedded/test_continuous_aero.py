"""AERO's steps on one continuous batch (``rollout.schedule="continuous"``) train what separate calls
train (``schedule="calls"``), both sampling per row (``rollout.rng="per-row"``): on the tiny preset,
two steps of every AERO method, the same rollouts per prompt, rewards, trained rows and advantages,
in one engine call instead of one per rescue window; and the run config refuses what cannot work."""

import pytest
import torch

from tests.trainer.embedded.test_decode_methods import step_context
from trainer.config import ConfigError, parse_run_config
from trainer.embedded.collect import collect
from trainer.embedded.presets import load_setup
from trainer.methods.spec import get_method

CASES = {
    "aero": {"method": "aero"},
    "aero sequential rounds": {"method": "aero", "aero": {"rounds_per_call": 1}},
    "aero binding budget": {"method": "aero", "aero": {"k_max": 10, "rounds_per_call": 2}},
    "aero-s1s2 top-p": {"method": "aero-s1s2", "top_p": 0.9, "temperature": 0.8},
    "aero-mem": {"method": "aero-mem", "train_size": 64},
}


def config(case: str, schedule: str):
    over = dict(CASES[case])
    method = over.pop("method")
    aero = {"n_explore": 4, "k_max": 3, **over.pop("aero", {})}
    return parse_run_config({"preset": "tiny", "method": method, "batch_prompts": 8, "n_total": 8, "seed": 3,
                             "rollout": {"rng": "per-row", "schedule": schedule}, "aero": aero, **over})


def two_steps(cfg, setup):
    ctx = step_context(cfg, setup, decode="static")
    steps, data_pos = [], 0
    for _ in range(2):
        c = collect(ctx, data_pos)
        data_pos += c.prompts_used
        group = {id(r): data_pos - c.prompts_used + r.prompt_index for r in c.generated}
        rows = sorted((group[id(r)], r.round, tuple(r.response_ids), r.finished, r.reward) for r in c.generated)
        trained = sorted((group[id(r)], r.round, tuple(r.response_ids), round(float(a), 6))
                         for r, a in zip(c.train, c.advantages.tolist()))
        steps.append(dict(rows=rows, trained=trained, calls=c.gen_calls, stats=c.stats))
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


@pytest.mark.parametrize("case", list(CASES))
def test_one_continuous_batch_trains_what_separate_calls_train(case, planners):
    calls_cfg, stream_cfg = config(case, "calls"), config(case, "continuous")
    setup = load_setup(calls_cfg)
    ref, gen_c, state_c = two_steps(calls_cfg, setup)
    got, gen_s, state_s = two_steps(stream_cfg, setup)
    skip = ("time/", "rescue/calls")
    for a, b in zip(ref, got):
        assert a["rows"] == b["rows"]
        assert a["trained"] == b["trained"]
        assert b["calls"] == 1
        assert {k: v for k, v in a["stats"].items() if not k.startswith(skip)} == \
            pytest.approx({k: v for k, v in b["stats"].items() if not k.startswith(skip)})
    assert torch.equal(gen_c, gen_s) and state_c == state_s
    if get_method(calls_cfg.method).aero.s1:
        assert max(s["calls"] for s in ref) >= 2  # the reference made rescue calls: rows did join the stream
        assert sum(s["stats"]["rescue/generated"] for s in got) > 0
    if case == "aero binding budget":  # rescue planned for the whole batch, as separate calls plan it
        assert any(p.global_windows for p in planners)
    if case == "aero":  # every window planned per prompt (the budget could not bind)
        assert all(p.global_windows == 0 and p.safe for p in planners) and any(p.rounds.max() for p in planners)


def test_per_row_sampling_is_its_own_sample():
    """rollout.rng=per-row samples other tokens than the stream from the same seed (a different
    random source, documented so), and its steps are still reproducible."""
    cfg = config("aero", "calls")
    setup = load_setup(cfg)
    a, _, _ = two_steps(cfg, setup)
    b, _, _ = two_steps(cfg, setup)
    assert a[0]["rows"] == b[0]["rows"]
    stream = parse_run_config({**cfg.model_dump(), "rollout": {"rng": "stream", "schedule": "calls"}})
    c, _, _ = two_steps(stream, setup)
    assert c[0]["rows"] != a[0]["rows"]


def test_the_config_refuses_what_cannot_run():
    with pytest.raises(ConfigError, match="rollout.schedule: a continuous batch samples each rollout from its own key"):
        parse_run_config({"preset": "tiny", "method": "aero", "rollout": {"schedule": "continuous"}})
    with pytest.raises(ConfigError, match="rollout.rng: per-row keys are the hf sampler's"):
        parse_run_config({"preset": "tiny", "rollout": {"sampler": "vllm", "rng": "per-row"}})
    with pytest.raises(ConfigError, match="rollout.rng: verl's rollout servers"):
        parse_run_config({"engine": "verl", "preset": None, "model_path": "/m", "task": "math",
                          "train_data": "/d.jsonl", "rollout": {"rng": "per-row"}})
    assert parse_run_config({}).rollout.rng == "stream" and parse_run_config({}).rollout.schedule == "calls"


def test_a_training_run_on_one_continuous_batch(tmp_path):
    """Two AERO steps through the loop (generation, update, metrics, checkpoint) on the schedule:
    one generate call per step, and the gradient the same as the calls schedule's to float rounding."""
    from trainer.engines import run_training
    from trainer.sinks import MemorySink

    steps = {}
    for schedule in ("calls", "continuous"):
        sink = MemorySink()
        cfg = parse_run_config({"preset": "tiny", "method": "aero", "steps": 2, "batch_prompts": 8, "eval_every": 0,
                                "eval_problems": 4, "eval_n": 2, "checkpoint_every": 1,
                                "rollout": {"rng": "per-row", "schedule": schedule}})
        run_training(cfg, tmp_path / schedule, sink)
        steps[schedule] = sink.steps
    assert sorted(steps["continuous"]) == [1, 2]
    for s in (1, 2):
        got, ref = steps["continuous"][s], steps["calls"][s]
        assert got["rescue/calls"] == 0 and ref["rescue/calls"] >= 1
        assert got["train/grad_norm"] == pytest.approx(ref["train/grad_norm"], rel=1e-5)
        assert got["rollout/generated"] == ref["rollout/generated"]
