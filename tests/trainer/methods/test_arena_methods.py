"""The arena's allocation peers as steps (trainer/methods/knapsack.py, speed.py, greso.py):
each against a seeded stand-in engine, at GRPO's budget; their sections and rules; the history
carried in the sampler's state; refusal on an engine that cannot run them; two real steps each
on the embedded engine."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trainer.methods.keyed import KeyedSampler
from trainer.spec.config import ConfigError, RunConfig, parse_run_config
from trainer.methods.knapsack import plan_counts
from trainer.methods.spec import get_method, get_step

P_SOLVE = [1.0] * 6 + [0.0] * 6 + [0.5] * 4  # solved, hopeless, partial


def _spent(s: KeyedSampler) -> list[int]:
    return [int(c.sum()) for c in s.counts]


# ---------------------------------------------------------------- Knapsack RL


def test_knapsack_plan_by_hand():
    cfg = RunConfig(method="knapsack", n_total=8, train_size=16, knapsack={"n_low": 2, "n_high": 20})
    counts, stats = plan_counts(cfg, [None, 0.5, 0.0, 1.0])
    # unseen: n_total; the three seen share 24: floors 2 + 2 for the value-zero pair, 20 (the
    # ceiling) for p = 0.5, and the fallback gives the never-solved prompt the 0 left.
    assert counts.tolist() == [8, 20, 2, 2] and stats["knapsack/unspent"] == 0
    assert (stats["knapsack/min_n"], stats["knapsack/max_n"], stats["knapsack/seen"]) == (2, 20, 3)
    counts, stats = plan_counts(cfg, [0.5, 0.0, 1.0])
    assert counts.tolist() == [20, 2, 2] and stats["knapsack/fallback"] == 0
    cfg = RunConfig(method="knapsack", n_total=8, train_size=16, knapsack={"n_low": 2, "n_high": 10})
    counts, stats = plan_counts(cfg, [0.5, 0.0, 1.0])  # p = 0.5 capped at 10: 10 more to the unsolved one
    assert counts.tolist() == [10, 10, 2] and stats["knapsack/fallback"] == 8 and stats["knapsack/unspent"] == 2


def test_knapsack_first_epoch_is_grpo_then_moves_budget_to_partial_prompts():
    cfg = RunConfig(method="knapsack", batch_prompts=8, n_total=8, train_size=16)
    s = KeyedSampler(P_SOLVE, 8, 0)
    for _ in range(4):  # two epochs of 16 prompts
        res = get_step(cfg.method)(cfg, s)
        assert res.generated == 64 and len(res.rows) == 64 and np.isfinite(res.advantages).all()
    assert _spent(s) == [64] * 4
    assert s.counts[0].tolist() == [8] * 8 and s.counts[1].tolist() == [8] * 8  # epoch 1: nothing known
    for counts, batch in zip(s.counts[2:], s.history[2:]):
        rate = np.asarray(P_SOLVE)[batch]
        assert (counts[rate == 1.0] == 2).all()  # always solved: the floor
        assert counts[rate == 0.5].min() > 8 or not (rate == 0.5).any()  # the partial ones get more
    assert s.state["knapsack"]["clock"] == 4 and len(s.state["knapsack"]["rate"]) == 16


def test_knapsack_resumes_from_its_state():
    cfg = RunConfig(method="knapsack", batch_prompts=8, n_total=8, train_size=16)
    a = KeyedSampler(P_SOLVE, 8, 0)
    for _ in range(2):
        get_step(cfg.method)(cfg, a)
    b = KeyedSampler(P_SOLVE, 8, 0, state={k: v for k, v in a.state.items()})
    b.pos = a.pos
    get_step(cfg.method)(cfg, b)
    assert b.counts[0].tolist() != [8] * 8  # planned from the remembered rates, not from scratch


# ---------------------------------------------------------------- SPEED-RL


def test_speed_screens_drops_and_spends_the_rest_on_kept_prompts(fake_sampler):
    cfg = parse_run_config({"method": "speed", "batch_prompts": 6, "n_total": 8, "speed": {"n_screen": 4}})
    s = fake_sampler(6, 0, p_solve=[0.0, 1.0, 0.5, 0.5, 0.0, 1.0])
    res = get_step("speed")(cfg, s, None)
    screened = [r for r in s.rows if r.round == 0]
    assert len(screened) == 24
    c0 = np.bincount([r.prompt_index for r in screened], weights=[r.reward for r in screened], minlength=6)
    kept = [p for p in range(6) if 0 < c0[p] < 4]
    assert set(np.unique(res.group).tolist()) == set(kept)
    cont = np.bincount([r.prompt_index for r in s.rows if r.round == 1], minlength=6)
    assert cont.sum() == 24 if kept else cont.sum() == 0  # (8 - 4) * 6 = 24 more for the kept prompts
    assert res.generated == len(s.rows) <= 48
    assert all(len(res.rows[res.group == p]) == 4 + cont[p] for p in kept)  # screening rows trained too
    assert res.stats["speed/dropped_all_fail"] == 2 and res.stats["speed/dropped_all_correct"] == 2


def test_speed_trains_nothing_when_every_prompt_is_dropped(fake_sampler):
    cfg = parse_run_config({"method": "speed", "batch_prompts": 4, "n_total": 8})
    res = get_step("speed")(cfg, fake_sampler(4, 1, p_solve=[0.0, 1.0, 0.0, 1.0]), None)
    assert len(res.rows) == 0 and res.generated == 16 and res.calls == 1 and res.stats["speed/unspent"] == 16


def test_speed_rules_name_the_field():
    with pytest.raises(ConfigError) as e:
        parse_run_config({"method": "speed", "n_total": 4, "speed": {"n_screen": 4}})
    assert e.value.issues[0][0] == "speed.n_screen"
    assert get_method("speed").verl.first_call_n(parse_run_config({"method": "speed"})) == 4


# ---------------------------------------------------------------- GRESO


def test_greso_skips_zero_variance_prompts_with_revisits_and_adapts():
    cfg = RunConfig(method="greso", batch_prompts=8, n_total=8, train_size=16, greso={"max_batches": 2})
    s = KeyedSampler(P_SOLVE, 8, 0)
    skipped = []
    for _ in range(12):
        res = get_step(cfg.method)(cfg, s)
        assert res.generated <= 64 and res.generated == len(res.rows) and res.generated % 8 == 0
        skipped.append(res.stats["greso/skipped"])
    assert skipped[:2] == [0, 0]  # epoch 1: no history
    assert sum(skipped[2:]) > 0
    streak = s.state["greso"]["streak"]
    assert all(streak[f"item {j}"][0] == 0 for j in range(12, 16) if f"item {j}" in streak)  # partial: never a streak
    assert s.state["greso"]["p_easy"] < 0.5  # 6 of 16 prompts all-correct > 8.3%: skip the easy ones more


def test_greso_select_by_hand():
    from trainer.methods.greso import EASY, HARD, select

    streak = [None, [0, HARD], [2, EASY], [3, HARD]]
    # probabilities 1, 1, 0.9^2 = 0.81, 0.5^3 = 0.125
    assert select(streak, (0.9, 0.5), np.array([0.99, 0.5, 0.8, 0.2])).tolist() == [True, True, True, False]
    assert select(streak, (0.9, 0.5), np.array([0.0, 0.0, 0.82, 0.1])).tolist() == [True, True, False, True]


# ---------------------------------------------------------------- config and engines


@pytest.mark.parametrize("method", ["knapsack", "greso"])
def test_history_methods_need_train_size_on_either_engine(method):
    for engine in ({}, {"engine": "verl", "shuffle_mini_batches": False}):
        with pytest.raises(ConfigError) as e:
            parse_run_config({"method": method, **engine})
        assert [loc for loc, _ in e.value.issues] == ["train_size"]
        assert parse_run_config({"method": method, "train_size": 64, **engine}).method == method


def test_sections_belong_to_their_method():
    assert parse_run_config({"method": "knapsack", "train_size": 8}).knapsack.n_low == 2
    with pytest.raises(ConfigError) as e:
        parse_run_config({"method": "grpo", "speed": {"n_screen": 2}})
    assert [loc for loc, _ in e.value.issues] == ["speed"]
    with pytest.raises(ConfigError) as e:
        parse_run_config({"method": "knapsack", "train_size": 8, "knapsack": {"n_low": 4, "n_high": 3}})
    assert e.value.issues[0][0] == "knapsack.n_high"


@pytest.mark.parametrize("method", ["knapsack", "speed", "greso"])
def test_two_real_steps_on_the_embedded_engine(method, tmp_path):
    from trainer.platform.run import run_training
    from trainer.platform.sinks import MemorySink

    cfg = parse_run_config({"method": method, "steps": 3, "batch_prompts": 8, "n_total": 8, "eval_every": 0,
                            "eval_problems": 8, "checkpoint_every": 0, "train_size": 8})
    sink = MemorySink()
    run_training(cfg, tmp_path, sink)
    assert len(sink.steps) == 3
    for m in sink.steps.values():
        assert m["rollout/generated"] <= 64 and m["rollout/trained"] <= m["rollout/generated"]
        assert m["flops/rollout"] > 0
