"""The engine-independent steps (trainer/methods/) against a fake deterministic sampler.

A legitimate unit test of pure logic: the fake engine (conftest.py) only draws seeded
outcomes, and each step must choose exactly what the embedded collectors chose before the
steps were factored out of them. The reference drivers below are those collectors' bodies
(trainer/embedded/collect.py before trainer/methods/ existed), kept over plain rows: same calls, same
order, same curation draws. The engines' adapters are checked on real engines by
tests/trainer/test_loop.py (embedded) and tests/trainer/verl/test_collect.py (verl DataProto)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.spec.config import RunConfig
from trainer.core.aero import CurationRules, aero_advantages, curate
from trainer.core.dapo import nonzero_variance_mask, overlong_penalty
from trainer.core.rescue import plan_rounds, replay, start_rescue
from trainer.core.strata import Stratum, stratify
from trainer.methods.aero import aero_step_with_ledger
from trainer.methods.spec import get_method, get_step
from trainer.methods.step import strata_stats


def _by_prompt(rows, P):
    groups = [[] for _ in range(P)]
    for r in rows:
        groups[r.prompt_index].append(r)
    return groups


def _ids(fake, rows):
    """Global ids (positions in generation order) of ``rows``, by identity."""
    where = {id(r): i for i, r in enumerate(fake.rows)}
    return [where[id(r)] for r in rows]


def _correct(groups):
    return np.array([sum(r.reward > 0.5 for r in g) for g in groups], dtype=np.int64)


def reference_aero(cfg, fake, rng):
    """The previous embedded ``collect_aero``, over the fake engine's rows."""
    a, P = cfg.aero, cfg.batch_prompts
    s1, s2, s3 = get_method(cfg.method).aero.flags

    def sample(counts, round_):
        first = len(fake.rows)
        fake.sample(counts, round_)
        return fake.rows[first:]

    fake.next_prompts()
    explore = sample([a.n_explore] * P, 0)
    groups = _by_prompt(explore, P)
    generated = list(explore)
    correct = _correct(groups)
    strata = stratify(correct, a.n_explore, a.S, a.tau)
    state = start_rescue(strata if s1 else np.full(P, int(Stratum.HIGH)), a.n_explore, cfg.n_total, P)
    calls = 1
    while s1:
        plan = plan_rounds(state, a.rounds_per_call, delta_n=a.delta_n, n_max=a.n_max, k_max=a.k_max,
                           split=a.budget_split)
        if len(plan) == 0:
            break
        new = sample(plan.sum(0).tolist(), state.rounds_used + 1)
        calls += 1
        generated += new
        new_groups = _by_prompt(new, P)
        state, used = replay(state, plan, [np.array([r.reward for r in g]) for g in new_groups])
        for p in range(P):
            groups[p] += [r for r, u in zip(new_groups[p], used[p]) if u]
    rules = CurationRules(s1=s1, s2=s2, s3=s3, n_explore=a.n_explore, alpha0=a.alpha0, beta0=a.beta0, k=a.k,
                          zero_variance_keep=a.zero_variance_keep, negative_selection=a.negative_selection,
                          rescue_negative=a.rescue_negative, zero_variance_selection=a.zero_variance_selection)
    curated = curate([np.array([r.reward for r in g]) for g in groups], strata, state.rescued_at, rules,
                     lengths_by_prompt=[np.array([r.length for r in g]) for g in groups], rng=rng)
    prompt_idx, roll_idx, gid = curated.flat()
    train = [groups[p][i] for p, i in zip(prompt_idx.tolist(), roll_idx.tolist())]
    adv = aero_advantages(torch.tensor([r.reward for r in train]), torch.as_tensor(gid), curated.kinds,
                          curated.u_tilde, eps=1e-6, unbiased=cfg.std_unbiased, normalize_std=cfg.adv_estimator == "grpo")
    stats = strata_stats(correct, a.n_explore, a.S, a.tau)
    stats.update({
        "zero_acc/after_rescue": float((curated.correct == 0).mean()),
        "rescue/rescued": float(state.rescued.sum()), "rescue/rounds": float(state.rounds_used),
        "rescue/calls": float(calls - 1), "rescue/generated": float(len(generated) - len(explore)),
        "rescue/budget_left": float(state.budget_left),
        "rescue/unused": float(state.unused),
        **{f"groups/{kind}": float(curated.kinds.count(kind)) for kind in ("rescued", "bayes", "low", "high", "zero")},
    })
    ledger = dict(strata=strata, rescued=np.array([k == "rescued" for k in curated.kinds]), produced=curated.produced,
                  correct=curated.correct,
                  mean_tokens=np.array([np.mean([r.prompt_len + r.length for r in g]) for g in groups]))
    return _ids(fake, train), adv, stats, ledger


def reference_dapo(cfg, fake):
    """The previous embedded ``collect_dapo``, over the fake engine's rows."""
    P, d = cfg.batch_prompts, cfg.dapo
    kept_groups, first_correct, rounds, used = [], None, 0, 0
    while rounds < d.max_gen_rounds and len(kept_groups) < P:
        fake.next_prompts()
        used += P
        first = len(fake.rows)
        fake.sample([cfg.n_total] * P, rounds)
        rollouts = fake.rows[first:]
        acc = torch.tensor([r.reward for r in rollouts])
        gid = torch.tensor([r.prompt_index for r in rollouts])
        if first_correct is None:
            first_correct = _correct(_by_prompt(rollouts, P))
        keep = nonzero_variance_mask(acc, gid) if d.dynamic_sampling else torch.ones(len(rollouts), dtype=torch.bool)
        groups = _by_prompt([r for r, k in zip(rollouts, keep.tolist()) if k], P)
        kept_groups += [g for g in groups if g][: P - len(kept_groups)]
        rounds += 1
    train = [r for g in kept_groups for r in g]
    lengths = torch.tensor([r.length for r in train], dtype=torch.float32)
    shaped = torch.tensor([r.reward for r in train]) + overlong_penalty(
        lengths, cfg.max_new_tokens, d.overlong_buffer, d.overlong_penalty)
    gid = torch.tensor([g for g, grp in enumerate(kept_groups) for _ in grp], dtype=torch.long)
    adv = grpo_ref(cfg, shaped, gid) if train else torch.zeros(0)
    stats = strata_stats(first_correct, cfg.n_total)
    stats["zero_acc/after_rescue"] = stats["zero_acc/after_explore"]
    stats.update({"dapo/gen_rounds": float(rounds), "dapo/kept_groups": float(len(kept_groups)),
                  "dapo/cap_hit": float(len(kept_groups) < P)})
    return _ids(fake, train), adv, stats, used


def grpo_ref(cfg, rewards, gid):
    from trainer.core.advantages import grpo_advantage

    return grpo_advantage(rewards, gid, eps=1e-6, unbiased=cfg.std_unbiased, normalize_std=cfg.adv_estimator == "grpo")


AERO_CASES = [
    {"method": "aero"},
    {"method": "aero", "aero": {"negative_selection": "random", "rescue_negative": "random",
                                "zero_variance_selection": "random"}},
    {"method": "aero", "aero": {"rounds_per_call": 3, "budget_split": "round-robin", "negative_selection": "longest"}},
    {"method": "aero", "aero": {"rounds_per_call": 0}},  # every round in one call
    {"method": "aero", "n_total": 10, "aero": {"n_explore": 4, "S": 1, "k": 2.0, "delta_n": 3}},
    {"method": "aero-s1"},
    {"method": "aero-s1s2", "adv_estimator": "drgrpo", "std_unbiased": False},
]


@pytest.mark.parametrize("case", AERO_CASES)
@pytest.mark.parametrize("seed", range(6))
def test_aero_step_equals_the_previous_embedded_collector(case, seed, fake_sampler):
    cfg = RunConfig(batch_prompts=12, **case)
    old_rows, old_adv, old_stats, old_ledger = reference_aero(cfg, fake_sampler(12, seed), np.random.default_rng(seed))
    fake = fake_sampler(12, seed)
    res, ledger = aero_step_with_ledger(cfg, fake, np.random.default_rng(seed), spec=get_method(cfg.method))
    assert res.rows.tolist() == old_rows
    assert torch.equal(torch.from_numpy(res.advantages), old_adv)  # the step's own advantages, what engines train
    assert res.stats == old_stats
    assert ledger.keys() == old_ledger.keys()
    for key in old_ledger:
        assert np.array_equal(ledger[key], old_ledger[key]), key
    assert res.cost_metrics is not None  # the savings, once the engine knows the step's cost
    assert (res.prompts_used, res.calls, res.generated) == (12, fake.calls, len(fake.rows))


@pytest.mark.parametrize("dapo", [{}, {"max_gen_rounds": 3}, {"max_gen_rounds": 2, "dynamic_sampling": False},
                                  {"max_gen_rounds": 4, "overlong_buffer": 6, "overlong_penalty": 0.5}])
@pytest.mark.parametrize("seed", range(6))
def test_dapo_step_equals_the_previous_embedded_collector(dapo, seed, fake_sampler):
    cfg = RunConfig(method="dapo", batch_prompts=6, n_total=4, dapo=dapo)
    old_rows, old_adv, old_stats, old_used = reference_dapo(cfg, fake_sampler(6, seed))
    fake = fake_sampler(6, seed)
    res = get_step("dapo")(cfg, fake)
    assert res.rows.tolist() == old_rows and res.stats == old_stats and res.prompts_used == old_used
    assert torch.equal(torch.from_numpy(res.advantages), old_adv) and res.cost_metrics is None


def test_grpo_step_trains_every_row_in_prompt_groups(fake_sampler):
    cfg = RunConfig(method="grpo", batch_prompts=5, n_total=4)
    fake = fake_sampler(5, 0)
    res = get_step("grpo")(cfg, fake)
    assert res.rows.tolist() == list(range(20)) and res.group.tolist() == [p for p in range(5) for _ in range(4)]
    reward = torch.tensor([r.reward for r in fake.rows])
    assert torch.equal(torch.from_numpy(res.advantages), grpo_ref(cfg, reward, torch.as_tensor(res.group)))
    assert res.stats["zero_acc/after_rescue"] == res.stats["zero_acc/after_explore"]
