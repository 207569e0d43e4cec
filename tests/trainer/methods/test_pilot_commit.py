"""Pilot-Commit (trainer/methods/pilot_commit.py): the pilot's rules by hand at the paper's
settings; the step on a deterministic stand-in engine over a finite prompt set (budget, commit,
eviction, deferral, a state that survives JSON); its config section and rules; two real steps on
the embedded engine."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainer.spec.config import ConfigError, parse_run_config
from trainer.methods.pilot_commit import (COMMIT, TOO_EASY, TOO_HARD, commit_order, evicts, pilot_accuracy,
                                          pilot_quota, pilot_size, pilot_verdict, reward_variance,
                                          solved_streak)
from trainer.methods.sampler import Samples
from trainer.methods.spec import get_method
from trainer.methods.spec import get_step


class Scripted:
    """N prompts of fixed kinds, drawn P at a time in data order (item j at position j mod N),
    ids "item j". Kind "S" is always solved, "H" never, "X" alternates within each call (its
    rollout 0, 2, 4... correct), so a pilot of 2 reads 0.5. Row ids run on across the batches of
    a step, as the adapters' do; :meth:`step` starts a new one."""

    def __init__(self, kinds: str, P: int, state: dict | None = None):
        self.kinds, self.P, self.N = list(kinds), P, len(kinds)
        self.state = {} if state is None else state
        self.pos, self.rows = 0, 0
        self.batch = np.zeros(0, dtype=np.int64)
        self.calls: list[dict[int, int]] = []  # per engine call: item -> rollouts

    def next_prompts(self) -> int:
        self.batch = (self.pos + np.arange(self.P)) % self.N
        self.pos += self.P
        return self.P

    def prompt_keys(self) -> list[str]:
        return [f"item {j}" for j in self.batch]

    def sample(self, counts, round_: int) -> Samples:
        counts = np.asarray(counts, dtype=np.int64)
        self.calls.append({int(self.batch[p]): int(k) for p, k in enumerate(counts) if k})
        prompt = np.repeat(np.arange(self.P), counts)
        j = np.concatenate([np.arange(k) for k in counts]) if len(prompt) else np.zeros(0, dtype=np.int64)
        kind = np.array([self.kinds[self.batch[p]] for p in prompt])
        reward = np.where(kind == "S", 1.0, np.where(kind == "X", (j % 2 == 0).astype(float), 0.0))
        s = Samples.build(self.rows, prompt, reward, np.full(len(prompt), 3), np.full(len(prompt), 7))
        self.rows += len(prompt)
        return s

    def step(self, cfg):
        self.rows, self.calls = 0, []
        return get_step(cfg.method)(cfg, self)


KINDS = "SHXSHXSHXSHXSHSH"  # S: items 0 3 6 9 12 14; H: 1 4 7 10 13 15; X: 2 5 8 11


def _cfg(pc: dict | None = None, **kw):
    """n_total = 8 (pilot 2, commit 6); evict_after = 0: one perfect pilot evicts, the paper's rule as written."""
    return parse_run_config({"method": "pilot-commit", "batch_prompts": 8, "n_total": 8, "train_size": 16,
                             "pilot_commit": {"evict_after": 0, **(pc or {})}, **kw})


# ---------------------------------------------------------------- the rules, by hand


def test_pilot_size_is_a_quarter_of_the_group_as_in_the_papers_runs():
    assert [pilot_size(n, 0.25) for n in (128, 64, 16, 8, 10)] == [32, 16, 4, 2, 2]
    assert pilot_size(12, 1 / 3) == 4 and pilot_size(16, 0.5) == 8


def test_verdict_and_eviction_at_the_papers_thresholds():
    # n_pilot = 32 (the 1.5B run, 32 + 96): commit iff 0.125 <= c / 32 <= 0.75, i.e. 4 <= c <= 24
    c = np.array([0, 3, 4, 16, 24, 25, 31, 32])
    p_hat = pilot_accuracy(c, 32)
    assert p_hat.tolist() == [0.0, 0.09375, 0.125, 0.5, 0.75, 0.78125, 0.96875, 1.0]
    assert pilot_verdict(p_hat, 0.125, 0.25).tolist() == [TOO_HARD, TOO_HARD, COMMIT, COMMIT, COMMIT, TOO_EASY,
                                                          TOO_EASY, TOO_EASY]
    assert evicts(p_hat, 1.0).tolist() == [False] * 7 + [True]  # only a perfect pilot is evicted
    assert evicts(p_hat, 0.9).tolist() == [False] * 6 + [True, True]
    # n_pilot = 4 (n_total = 16 here): c = 1, 2, 3 commit; 0 is deferred, 4 evicted
    assert pilot_verdict(pilot_accuracy(np.arange(5), 4), 0.125, 0.25).tolist() == [TOO_HARD, COMMIT, COMMIT, COMMIT,
                                                                                     TOO_EASY]


def test_solved_streak_adds_up_perfect_pilots_over_visits():
    assert solved_streak(0, 1.0, 4, 1.0) == 4 and solved_streak(12, 1.0, 4, 1.0) == 16  # the 4th visit: 16, evicted
    assert solved_streak(12, 0.75, 4, 1.0) == 0  # one miss resets it
    assert solved_streak(0, 0.75, 4, 0.7) == 4 and solved_streak(0, 0.5, 4, 0.7) == 0


def test_pilot_quota_prices_a_pilot_with_its_expected_commit():
    # n_total = 16: pilot 4, commit 12; P = 64, budget 1024
    assert pilot_quota(1024, 4, 12, 1.0) == 64  # nothing seen yet: a whole group each, GRPO's P prompts
    assert pilot_quota(640, 4, 12, 0.5) == 64  # half passed so far: 10 expected per prompt
    assert pilot_quota(640, 4, 12, 0.0) == 157  # none passed: pilots only, but one commit must still fit
    assert pilot_quota(15, 4, 12, 0.0) == 0 and pilot_quota(16, 4, 12, 1.0) == 1 and pilot_quota(0, 2, 6, 0.0) == 0


def test_commits_go_to_the_largest_pilot_variance_first():
    p_hat = np.array([0.25, 0.5, 0.75, 0.5, 1.0])
    assert reward_variance(p_hat).tolist() == [0.1875, 0.25, 0.1875, 0.25, 0.0]
    passed = np.array([True, True, True, True, False])
    assert commit_order(p_hat, passed, 3).tolist() == [True, True, False, True, False]  # ties in batch order
    assert commit_order(p_hat, passed, 9).tolist() == passed.tolist() and not commit_order(p_hat, passed, 0).any()


# ---------------------------------------------------------------- the step


def test_step_pilots_commits_defers_and_evicts_within_grpos_budget():
    """n_total = 8: pilot 2, commit 6; budget 64; three batches of 8 (module docstring)."""
    s = Scripted(KINDS, 8)
    res = s.step(_cfg())
    # batch 1, items 0-7: min(64 / 8, (64 - 6) / 2) = 8 piloted (16); X items 2, 5 committed (12); left 36, q = 2/8
    # batch 2, items 8-15: min(36 / (2 + 0.25 * 6), (36 - 6) / 2) = 10 >= 8 piloted (16); 8, 11 committed; left 8
    # batch 3, items 0-7 again: 0, 3, 6 evicted in batch 1, skipped; min(8 / 3.5, (8 - 6) / 2) = 1 piloted (item 1,
    # too hard again); left 6, and no group fits any more
    assert s.calls == [dict.fromkeys(range(8), 2), {2: 6, 5: 6}, dict.fromkeys(range(8, 16), 2), {8: 6, 11: 6}, {1: 2}]
    assert res.generated == 58 == sum(sum(c.values()) for c in s.calls) and res.calls == 5 and res.prompts_used == 24
    assert len(res.rows) == 32 and np.bincount(res.group).tolist() == [8] * 4  # 4 groups of n_total = 8
    want = {"piloted": 17, "pilot_rollouts": 34, "committed": 4, "uncommitted": 0, "too_easy": 6, "deferred": 7,
            "evicted": 6, "evicted_skipped": 3, "evicted_total": 6, "unpiloted": 4, "batches": 3, "unspent": 6,
            "recovered": 0}
    assert {k: res.stats[f"pilot_commit/{k}"] for k in want} == want
    state = s.state["pilot_commit"]
    assert sorted(state["evicted"]) == [f"item {j}" for j in sorted("0 3 6 9 12 14".split())]
    assert sorted(state["deferred"]) == [f"item {j}" for j in sorted("1 4 7 10 13 15".split())] and state["clock"] == 1
    # every trained group is pilot + commit rows with GRPO's advantage over all 8 (4 correct, 4 wrong)
    reward = np.concatenate([np.where(np.arange(n) % 2 == 0, 1.0, 0.0) for n in (2, 6)] * 4)
    assert np.allclose(np.sign(res.advantages), np.where(reward == 1.0, 1.0, -1.0))
    assert np.allclose(np.abs(res.advantages), np.abs(res.advantages[0]))
    assert res.stats["zero_acc/after_explore"] == pytest.approx(7 / 17)  # the H pilots


def test_evicted_prompts_get_no_rollout_in_later_epochs_and_a_state_round_trip_changes_nothing():
    a = Scripted(KINDS, 8)
    a.step(_cfg())
    assert json.loads(json.dumps(a.state)) == a.state  # plain JSON data
    b = Scripted(KINDS, 8, state=json.loads(json.dumps(a.state)))  # what a checkpoint round trip does
    b.pos = a.pos
    ra, rb = a.step(_cfg()), b.step(_cfg())
    assert a.calls == b.calls and ra.rows.tolist() == rb.rows.tolist() and np.array_equal(ra.advantages, rb.advantages)
    assert a.state == b.state and a.state["pilot_commit"]["clock"] == 2
    # step 2 from item 8: 9, 12, 14 evicted in step 1, skipped; none of the evicted is ever sampled again
    assert a.calls[0] == {8: 2, 10: 2, 11: 2, 13: 2, 15: 2} and ra.generated == 64
    gone = {int(k.split()[1]) for k in a.state["pilot_commit"]["evicted"]}
    assert gone == {0, 3, 6, 9, 12, 14}
    for _ in range(3):
        a.step(_cfg())
        assert not set().union(*a.calls) & gone and sum(sum(c.values()) for c in a.calls) <= 64


def test_a_deferred_prompt_that_turns_partial_is_recovered():
    s = Scripted("HHXX", 4)
    s.step(_cfg({"max_batches": 1}, batch_prompts=4))
    assert sorted(s.state["pilot_commit"]["deferred"]) == ["item 0", "item 1"]
    s.kinds[0] = "X"  # the policy learned item 0
    res = s.step(_cfg({"max_batches": 1}, batch_prompts=4))
    assert res.stats["pilot_commit/recovered"] == 1 and res.stats["pilot_commit/committed"] == 3
    assert sorted(s.state["pilot_commit"]["deferred"]) == ["item 1"]


def test_survivors_beyond_the_budget_stay_uncommitted():
    s = Scripted("HHHHXXXX", 4)
    res = s.step(_cfg({"max_batches": 2}, batch_prompts=4))  # budget 32
    # batch 1: all too hard (8), q = 0; batch 2: min(24 / 2, 18 / 2) = 9 >= 4 piloted (8), 4 pass, 16 // 6 = 2 fit
    assert s.calls == [dict.fromkeys(range(4), 2), dict.fromkeys(range(4, 8), 2), {4: 6, 5: 6}]
    assert res.stats["pilot_commit/uncommitted"] == 2 and res.stats["pilot_commit/unspent"] == 4


def test_no_eviction_when_switched_off_and_a_fully_evicted_set_trains_nothing():
    s = Scripted("SSSS", 4)
    s.step(_cfg({"evict": False}, batch_prompts=4))
    assert s.state["pilot_commit"]["evicted"] == {}
    s = Scripted("SSSS", 4)
    first = s.step(_cfg(batch_prompts=4))
    assert first.generated == 8 and len(first.rows) == 0 and first.stats["pilot_commit/evicted"] == 4
    res = s.step(_cfg(batch_prompts=4))  # every prompt evicted: no engine call at all
    assert (res.generated, res.calls, len(res.rows), res.prompts_used) == (0, 0, 0, 12) and s.calls == []
    assert res.stats["pilot_commit/evicted_skipped"] == 12 and res.stats["pilot_commit/unspent"] == 32


def test_eviction_waits_for_evict_after_perfect_pilot_rollouts_over_visits():
    s = Scripted("SS", 2)
    cfg = _cfg({"max_batches": 1, "evict_after": 4}, batch_prompts=2)  # pilots of 2: two perfect visits
    s.step(cfg)
    assert s.state["pilot_commit"]["streak"] == {"item 0": 2, "item 1": 2} and s.state["pilot_commit"]["evicted"] == {}
    s.kinds[1] = "X"  # item 1 misses once: its streak resets
    res = s.step(cfg)
    assert s.state["pilot_commit"]["evicted"] == {"item 0": 2} and s.state["pilot_commit"]["streak"] == {}
    assert res.stats["pilot_commit/evicted"] == 1 and res.stats["pilot_commit/committed"] == 1
    assert parse_run_config({"method": "pilot-commit", "train_size": 8}).pilot_commit.evict_after == 16


@pytest.mark.parametrize("seed", range(3))
def test_budget_is_never_above_grpos_on_random_outcomes(seed):
    from tests.trainer.methods.keyed import KeyedSampler

    class RunOn(KeyedSampler):  # row ids run on across a step's batches, as the adapters' do
        def next_prompts(self) -> int:
            first, P = self.first_rows, super().next_prompts()
            self.first_rows = first
            return P

    rates = np.random.default_rng(seed).choice([0.0, 0.1, 0.3, 0.6, 0.9, 1.0], 24)
    s = RunOn(rates, 8, seed)
    cfg = parse_run_config({"method": "pilot-commit", "batch_prompts": 8, "n_total": 16, "train_size": 24})
    for _ in range(6):
        s.first_rows = 0
        res = get_step(cfg.method)(cfg, s)
        assert res.generated <= 16 * 8 and np.isfinite(res.advantages).all() and len(set(res.rows.tolist())) == len(res.rows)
        assert np.bincount(res.group).tolist() == [16] * int(res.stats["pilot_commit/committed"])


# ---------------------------------------------------------------- config and engines


def test_section_rules_name_the_field():
    cfg = parse_run_config({"method": "pilot-commit", "train_size": 64})
    assert (cfg.pilot_commit.pilot_frac, cfg.pilot_commit.p_lower, cfg.pilot_commit.p_upper) == (0.25, 0.125, 0.25)
    cases = [({"n_total": 2}, "n_total"),
             ({"n_total": 4}, "pilot_commit.pilot_frac"),  # floor(0.25 * 4) = 1 pilot rollout
             ({"pilot_commit": {"p_lower": 0.8}}, "pilot_commit.p_lower"),  # [0.8, 0.75]: empty
             ({"pilot_commit": {"p_lower": 0.3, "p_upper": 0.6}}, "pilot_commit.p_lower"),  # no c / 4 in [0.3, 0.4]
             ({"pilot_commit": {"max_batches": 0}}, "pilot_commit.max_batches")]
    for kw, field in cases:
        with pytest.raises(ConfigError) as e:
            parse_run_config({"method": "pilot-commit", "train_size": 64, **kw})
        assert e.value.issues[0][0] == field, (kw, e.value.issues)
    with pytest.raises(ConfigError) as e:
        parse_run_config({"method": "pilot-commit"})
    assert [loc for loc, _ in e.value.issues] == ["train_size"]
    with pytest.raises(ConfigError) as e:
        parse_run_config({"method": "grpo", "pilot_commit": {"p_lower": 0.1}})
    assert [loc for loc, _ in e.value.issues] == ["pilot_commit"]


def test_spec_runs_on_both_engines_with_the_pilot_as_verls_first_call():
    spec = get_method("pilot-commit")
    cfg = parse_run_config({"method": "pilot-commit", "train_size": 64, "engine": "verl", "shuffle_mini_batches": False})
    assert spec.needs.engines == ("embedded", "verl") and spec.needs.prompt_ids and not spec.verl.stock_fit
    assert spec.verl.first_call_n(cfg) == 4 and spec.verl.prompt_batches(cfg) == 3
    assert [s["name"] for s in spec.to_json()["sections"]] == ["pilot_commit"]


def test_two_real_steps_on_the_embedded_engine(tmp_path):
    from trainer.platform.run import run_training
    from trainer.platform.sinks import MemorySink

    cfg = parse_run_config({"method": "pilot-commit", "steps": 2, "batch_prompts": 8, "n_total": 8, "eval_every": 0,
                            "eval_problems": 8, "checkpoint_every": 0, "train_size": 16})
    sink = MemorySink()
    run_training(cfg, tmp_path, sink)
    assert len(sink.steps) == 2
    for m in sink.steps.values():
        assert m["rollout/generated"] <= 64 and m["rollout/trained"] <= m["rollout/generated"]
        assert m["rollout/trained"] == 8 * m["pilot_commit/committed"]
        assert m["pilot_commit/pilot_rollouts"] == 2 * m["pilot_commit/piloted"] and m["flops/rollout"] > 0


def test_state_is_checkpointed_and_a_resumed_run_is_the_same(tmp_path):
    """The evicted / deferred / streak records go into the checkpoint (the sampler's state): a run
    stopped after step 2 and resumed logs what an uninterrupted one does (timings aside)."""
    from trainer.embedded.checkpoint import load_latest_checkpoint
    from trainer.platform.run import run_training
    from trainer.platform.sinks import JsonlSink

    cfg = parse_run_config({"preset": "tiny", "method": "pilot-commit", "steps": 4, "batch_prompts": 4, "n_total": 8,
                            "train_size": 8, "eval_every": 0, "eval_problems": 4, "eval_n": 2, "checkpoint_every": 2,
                            "optim": {"lr": 1e-3}, "pilot_commit": {"evict_after": 2}})

    def metrics(d):
        rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
        return {r["step"]: {k: v for k, v in r.items() if not k.startswith(("time/", "system/"))} for r in rows}

    run_training(cfg, tmp_path / "a", JsonlSink(tmp_path / "a"))
    calls = {"n": 0}

    def stop_after_two():
        calls["n"] += 1
        return calls["n"] > 2

    assert run_training(cfg, tmp_path / "b", JsonlSink(tmp_path / "b"), should_stop=stop_after_two)["last_step"] == 2
    state = load_latest_checkpoint(tmp_path / "b")["method_state"]["pilot_commit"]
    assert state["clock"] == 2 and set(state) == {"clock", "evicted", "deferred", "streak"}
    assert run_training(cfg, tmp_path / "b", JsonlSink(tmp_path / "b"))["last_step"] == 4
    a, b = metrics(tmp_path / "a"), metrics(tmp_path / "b")
    assert sorted(b) == [1, 2, 3, 4] and a == b
    assert all(m["rollout/generated"] <= 8 * 4 for m in a.values())  # GRPO's n_total * P
