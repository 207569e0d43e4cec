"""The training loop end to end on the shipped tiny preset: every method learns something
(parameters move, advantages are non-zero), resume is exact, bad input never stops a run."""

import json

import pytest
import torch

from trainer.embedded.collect import StepContext, collect
from trainer.spec.config import ConfigError, parse_run_config
from trainer.platform.run import run_training
from trainer.platform.sinks import JsonlSink, MemorySink, MultiSink
from trainer.embedded.presets import load_setup
from trainer.rollout.base import SamplingParams

SMALL = {"preset": "tiny", "steps": 2, "batch_prompts": 4, "eval_every": 0, "eval_problems": 4, "eval_n": 4,
         "checkpoint_every": 0, "optim": {"lr": 1e-3}}
TIMING = ("time/", "system/", "savings/s1_s", "savings/s2_s", "savings/s3_s")  # measured, not reproduced


def _params(out_dir):
    from trainer.embedded.checkpoint import load_latest_checkpoint

    return load_latest_checkpoint(out_dir)["model"]


@pytest.mark.parametrize("method", ["grpo", "dapo", "aero", "aero-s1", "aero-s1s2"])
def test_every_method_trains(method, tmp_path):
    sink = MemorySink()
    summary = run_training(parse_run_config({**SMALL, "method": method}), tmp_path, sink)
    assert summary["status"] == "completed" and summary["last_step"] == 2
    assert sorted(sink.steps) == [1, 2]
    base = load_setup(parse_run_config(SMALL)).model.state_dict()
    after = _params(tmp_path)
    moved = max((after[k].float() - base[k].float()).abs().max().item() for k in base)
    assert moved > 1e-5, "parameters did not change"
    m = sink.steps[2]
    assert m["rollout/generated"] <= SMALL["batch_prompts"] * 16  # never past the equal budget n_total * P
    assert m["flops/total"] == pytest.approx(m["flops/rollout"] + m["flops/train"])
    for key in ("time/rollout_s", "time/train_s", "tokens/generated", "zero_acc/after_explore", "train/grad_norm"):
        assert key in m
    assert 2 in sink.evals and "overall" in sink.evals[2]  # final eval


def test_aero_trains_fewer_rollouts_than_it_generates(tmp_path):
    sink = MemorySink()
    run_training(parse_run_config({**SMALL, "method": "aero", "steps": 3, "batch_prompts": 8}), tmp_path, sink)
    gen = sum(s["rollout/generated"] for s in sink.steps.values())
    trained = sum(s["rollout/trained"] for s in sink.steps.values())
    assert trained < gen
    # the waterfall ledger is logged and consistent: GRPO's counterfactual trains n_total * P
    assert all(s["savings/grpo_rollouts"] == 8 * 16 for s in sink.steps.values())
    assert any(s["adv/zero_frac"] < 1.0 for s in sink.steps.values())


class EventSink(MemorySink):
    """Records the loop's sink events in order."""

    def __init__(self):
        super().__init__()
        self.events: list[tuple] = []

    def log(self, step, metrics):
        super().log(step, metrics)
        self.events.append(("log", step))

    def truncate_after(self, step):
        super().truncate_after(step)
        self.events.append(("truncate_after", step))

    def before_checkpoint(self, step):
        self.events.append(("before_checkpoint", step))

    def on_checkpoint(self, step, path):
        assert (path / "state.pt").exists() and (path.parent / "latest").read_text() == path.name
        self.events.append(("on_checkpoint", step))


RESUMED = {
    "aero": {"method": "aero", "eval_every": 2},
    # several mini-batches: the reshuffle's RNG is checkpointed too (a resumed run draws the same partitions)
    "grpo-reshuffled": {"method": "grpo", "eval_every": 2, "mini_batches": 2, "ppo_epochs": 2},
}


@pytest.mark.parametrize("name", sorted(RESUMED))
def test_resume_is_exact(name, tmp_path):
    cfg = parse_run_config({**SMALL, **RESUMED[name], "steps": 4, "checkpoint_every": 2})
    straight = JsonlSink(tmp_path / "a")
    run_training(cfg, tmp_path / "a", straight)

    calls = {"n": 0}

    def stop_after_two():
        calls["n"] += 1
        return calls["n"] > 2  # polled before each step: steps 1-2 run, then stop

    ev1, ev2 = EventSink(), EventSink()
    first = run_training(cfg, tmp_path / "b", MultiSink(JsonlSink(tmp_path / "b"), ev1), should_stop=stop_after_two)
    assert first == {**first, "status": "stopped", "last_step": 2}
    second = run_training(cfg, tmp_path / "b", MultiSink(JsonlSink(tmp_path / "b"), ev2))
    assert second["status"] == "completed" and second["last_step"] == 4
    # The loop announces each checkpoint around writing it (on schedule, and where a stop ends
    # the run) and the resume point; the sinks do not re-derive the schedule.
    ckpt = lambda s: [("before_checkpoint", s), ("on_checkpoint", s)]  # noqa: E731
    assert ev1.events == [("log", 1), ("log", 2), *ckpt(2), *ckpt(2)]
    assert ev2.events == [("truncate_after", 2), ("log", 3), ("log", 4), *ckpt(4)]

    a, b = _metrics(tmp_path / "a"), _metrics(tmp_path / "b")
    assert sorted(b) == [1, 2, 3, 4]
    assert a == b
    details = lambda d: [json.loads(ln) for ln in (d / "details.jsonl").read_text().splitlines()]  # noqa: E731
    assert [x["step"] for x in details(tmp_path / "b")] == [1, 2, 3, 4]
    assert details(tmp_path / "a") == details(tmp_path / "b")  # the stored rollout sample resumes exactly too
    evals = lambda d: [json.loads(ln) for ln in (d / "evals.jsonl").read_text().splitlines()]  # noqa: E731
    assert evals(tmp_path / "a") == evals(tmp_path / "b")


def _metrics(d):
    rows = [json.loads(ln) for ln in (d / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: {k: v for k, v in r.items() if not k.startswith(TIMING)} for r in rows}


def test_the_reshuffle_rng_is_checkpointed_and_drawn_only_with_several_mini_batches(tmp_path):
    from trainer.embedded.checkpoint import load_latest_checkpoint
    from trainer.embedded.update import shuffle_rng

    seeded = shuffle_rng(0).bit_generator.state
    for mb in (1, 2):
        run_training(parse_run_config({**SMALL, "method": "grpo", "mini_batches": mb}), tmp_path / str(mb), MemorySink())
        saved = load_latest_checkpoint(tmp_path / str(mb))["shuffle_rng"]
        assert (saved == seeded) == (mb == 1)


def test_a_checkpoint_from_before_the_reshuffle_still_resumes(tmp_path):
    """Checkpoints written before the shuffle RNG existed have no "shuffle_rng": they load with
    the RNG at its seed, and a run with one mini-batch (which never draws from it) resumes exactly."""
    cfg = parse_run_config({**SMALL, "method": "grpo", "steps": 4, "checkpoint_every": 2})
    run_training(cfg, tmp_path / "a", JsonlSink(tmp_path / "a"))
    calls = {"n": 0}

    def stop_after_two():
        calls["n"] += 1
        return calls["n"] > 2

    run_training(cfg, tmp_path / "b", JsonlSink(tmp_path / "b"), should_stop=stop_after_two)
    path = tmp_path / "b" / "checkpoints" / (tmp_path / "b" / "checkpoints" / "latest").read_text() / "state.pt"
    old = torch.load(path, weights_only=False)
    del old["shuffle_rng"]
    torch.save(old, path)
    assert run_training(cfg, tmp_path / "b", JsonlSink(tmp_path / "b"))["last_step"] == 4
    assert _metrics(tmp_path / "a") == _metrics(tmp_path / "b")


def test_bad_config_refused_before_compute(tmp_path):
    with pytest.raises(ConfigError) as e:
        run_training(parse_run_config({**SMALL, "aero": {"n_explore": 32}}), tmp_path, MemorySink())
    assert e.value.issues[0][0] == "aero.n_explore"
    with pytest.raises(ConfigError) as e:  # prompt + response past the tiny model's 128-token context
        run_training(parse_run_config({**SMALL, "max_new_tokens": 120}), tmp_path, MemorySink())
    assert e.value.issues[0][0] == "max_new_tokens"
    assert not (tmp_path / "metrics.jsonl").exists()


def test_missing_model_dir_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError) as e:
        cfg = parse_run_config({**SMALL, "preset": None, "model_path": str(tmp_path / "nope")})
        run_training(cfg, tmp_path, MemorySink())
    assert e.value.issues[0][0] == "model_path" and "nothing is downloaded" in e.value.issues[0][1]


def test_dapo_cap_hit_trains_on_what_there_is(tmp_path):
    sink = MemorySink()
    run_training(parse_run_config({**SMALL, "method": "dapo", "steps": 3}), tmp_path, sink)
    for m in sink.steps.values():
        assert m["dapo/gen_rounds"] == 1 and m["dapo/kept_groups"] <= 4
        assert m["rollout/trained"] == 16 * m["dapo/kept_groups"]
    assert any(m["dapo/cap_hit"] == 1.0 for m in sink.steps.values())


class _FlakyTask:
    """Wraps a task; its verifier raises on every third response (a crashing reward function)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0
        self.name, self.tokenizer = inner.name, inner.tokenizer

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def score(self, response, problem):
        self.calls += 1
        if self.calls % 3 == 0:
            raise RuntimeError("verifier crashed")
        return self.inner.score(response, problem)


def test_crashing_verifier_scores_zero_and_is_counted():
    import numpy as np

    cfg = parse_run_config({**SMALL, "method": "grpo"})
    setup = load_setup(cfg)
    task = _FlakyTask(setup.task)
    ctx = StepContext(cfg=cfg, task=task, sampler=setup.sampler, sampling=SamplingParams(1.0, 1.0, 12),
                      gen=torch.Generator().manual_seed(0), rng=np.random.default_rng(0))
    out = collect(ctx, 0)
    assert out.stats["verifier/errors"] == len(out.generated) // 3
    assert all(r.reward == 0.0 for i, r in enumerate(out.generated) if (i + 1) % 3 == 0)


def test_eval_draws_are_paired_across_runs_and_use_the_eval_temperature(tmp_path):
    """The eval seed depends on the step only: two runs of different seeds and methods evaluate
    the (identical) base at step 0 identically; eval_temperature, not the training one, applies."""
    cfg = {**SMALL, "steps": 1, "eval_every": 1, "eval_problems": 8}
    a, b = MemorySink(), MemorySink()
    run_training(parse_run_config({**cfg, "method": "grpo", "seed": 0}), tmp_path / "a", a)
    run_training(parse_run_config({**cfg, "method": "aero", "seed": 5}), tmp_path / "b", b)
    assert a.evals[0]["overall"]["per_problem"] == b.evals[0]["overall"]["per_problem"]
    greedy = MemorySink()
    greedy_cfg = parse_run_config({**cfg, "method": "grpo", "eval_temperature": 0.0, "eval_n": 2})
    run_training(greedy_cfg, tmp_path / "g", greedy)
    assert all(c in (0, 2) for _, c in greedy.evals[0]["overall"]["per_problem"])  # greedy: both samples agree


def test_warmup_steps_replace_the_ratio():
    from trainer.embedded.update import warmup_constant_lr, warmup_length

    assert warmup_length(60, 0.03) == 2 and warmup_length(60, 0.03, warmup_steps=10) == 10
    assert warmup_length(120, 0.03, warmup_steps=10, per_step=2) == 20
    assert [warmup_constant_lr(s, 4) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    assert warmup_constant_lr(0, 0) == 1.0
