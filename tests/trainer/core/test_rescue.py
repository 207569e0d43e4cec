import numpy as np
import pytest

from trainer.core.aero import curate
from trainer.core.rescue import plan_rescue_round, plan_rounds, replay, start_rescue
from trainer.core.strata import Stratum

R, L, H = int(Stratum.RESCUE), int(Stratum.LOW), int(Stratum.HIGH)


def next_round(state, **kw):
    """The paper's sequential loop, one round at a time: a one-round plan (zeros when over)."""
    plan = plan_rounds(state, 1, **kw)
    return plan[0] if len(plan) else np.zeros(len(state.active), dtype=np.int64)


def apply_round(state, counts, rewards):
    return replay(state, np.asarray(counts, dtype=np.int64)[None, :], rewards)[0]


def test_plan_round_unbinding_and_n_max():
    got = plan_rescue_round([True, False, True, True], [8, 8, 31, 32], 100, delta_n=2, n_max=32)
    assert got.tolist() == [2, 0, 1, 0]


@pytest.mark.parametrize("split,budget,want", [
    ("prompt-order", 5, [2, 2, 1, 0]),
    ("round-robin", 5, [2, 1, 1, 1]),
    ("prompt-order", 3, [2, 1, 0, 0]),
    ("round-robin", 3, [1, 1, 1, 0]),
    ("round-robin", 0, [0, 0, 0, 0]),
    ("prompt-order", -4, [0, 0, 0, 0]),
])
def test_plan_round_budget_exhausted_mid_round(split, budget, want):
    got = plan_rescue_round([True] * 4, [8] * 4, budget, delta_n=2, n_max=32, split=split)
    assert got.tolist() == want


def test_plan_round_variable_shares():
    # shares [1, 2, 2] (first prompt is one below n_max), budget 4
    args = ([True] * 3, [31, 8, 8], 4)
    assert plan_rescue_round(*args, delta_n=2, n_max=32, split="round-robin").tolist() == [1, 2, 1]
    assert plan_rescue_round(*args, delta_n=2, n_max=32, split="prompt-order").tolist() == [1, 2, 1]


def _deal_one_at_a_time(want, budget):
    give = [0] * len(want)
    while budget > 0 and any(g < w for g, w in zip(give, want)):
        for i in range(len(want)):
            if budget and give[i] < want[i]:
                give[i] += 1
                budget -= 1
    return give


def test_round_robin_equals_literal_dealing():
    rng = np.random.default_rng(0)
    for _ in range(200):
        P = int(rng.integers(1, 7))
        active = rng.random(P) < 0.7
        produced = rng.integers(8, 33, P)
        budget = int(rng.integers(0, 20))
        delta_n = int(rng.integers(1, 5))
        want = np.where(active, np.clip(np.minimum(delta_n, 32 - produced), 0, None), 0)
        got = plan_rescue_round(active, produced, budget, delta_n, 32, "round-robin")
        assert got.tolist() == _deal_one_at_a_time(want.tolist(), budget)
        po = plan_rescue_round(active, produced, budget, delta_n, 32, "prompt-order")
        assert po.sum() == min(budget, want.sum()) == got.sum() and (po <= want).all()


KW = dict(delta_n=2, n_max=32, k_max=10)


def _rewards(counts, blocks):
    """Per-prompt reward arrays for a round: blocks maps prompt -> list."""
    return [np.asarray(blocks.get(p, [0] * int(n)), dtype=float) for p, n in enumerate(counts)]


def test_rescue_rounds_budget_and_early_stop():
    strata = [R, R, H, R]
    st = start_rescue(strata, n_explore=8, n_total=10)  # B = 2 * 4 = 8
    assert st.budget_left == 8 and st.active.tolist() == [True, True, False, True]
    c1 = next_round(st, **KW)
    assert c1.tolist() == [2, 2, 0, 2]
    st = apply_round(st, c1, _rewards(c1, {0: [0, 1]}))
    assert st.rescued_at.tolist() == [9, -1, -1, -1]  # index 8 + 1 in prompt 0's list
    assert st.produced.tolist() == [10, 10, 8, 10] and st.budget_left == 2 and st.rounds_used == 1
    c2 = next_round(st, **KW)
    assert c2.tolist() == [0, 2, 0, 0]  # rescued prompt 0 gets nothing; budget 2 binds, prompt order
    assert next_round(st, **KW, split="round-robin").tolist() == [0, 1, 0, 1]
    st = apply_round(st, c2, _rewards(c2, {}))
    assert st.budget_left == 0 and next_round(st, **KW).sum() == 0  # budget exhausted: stop
    assert st.produced.tolist() == [10, 12, 8, 10] and st.rounds_used == 2


def test_rescue_stops_at_k_max_and_never_succeeds():
    st = start_rescue([R], n_explore=8, n_total=100)
    rounds = 0
    while (c := next_round(st, delta_n=2, n_max=32, k_max=3)).sum():
        st = apply_round(st, c, [np.zeros(int(c[0]))])
        rounds += 1
    assert rounds == 3 and st.rounds_used == 3 and st.produced.tolist() == [14] and st.rescued_at.tolist() == [-1]
    assert next_round(st, delta_n=2, n_max=32, k_max=0).sum() == 0


def test_rescue_stops_at_n_max():
    st = start_rescue([R], n_explore=8, n_total=100)
    counts = []
    while (c := next_round(st, delta_n=2, n_max=11, k_max=10)).sum():
        counts.append(int(c[0]))
        st = apply_round(st, c, [np.zeros(int(c[0]))])
    assert counts == [2, 1] and st.produced.tolist() == [11] and st.rounds_used == 2


def test_apply_round_checks_reward_lengths():
    st = start_rescue([R, R], 8, 16)
    with pytest.raises(ValueError):
        apply_round(st, [2, 2], [np.zeros(2), np.zeros(1)])


def test_speculative_window_by_hand():
    st = start_rescue([R, R], n_explore=8, n_total=100)
    plan = plan_rounds(st, 3, **KW)
    assert plan.tolist() == [[2, 2], [2, 2], [2, 2]]
    new = [np.array([0, 1, 0, 0, 1, 1.0]), np.array([0, 0, 0, 0, 0, 1.0])]
    st2, used = replay(st, plan, new)
    assert st2.rescued_at.tolist() == [9, 13]
    assert used[0].tolist() == [True, True, False, False, False, False] and used[1].all()
    assert st2.produced.tolist() == [10, 14] and st2.unused == 4 and st2.rounds_used == 3
    assert st2.budget_left == (100 - 8) * 2 - 12  # charged for what was generated


def test_zero_rounds_per_call_plans_every_remaining_round():
    st = start_rescue([R, R], n_explore=8, n_total=100)
    assert plan_rounds(st, 0, **KW).tolist() == plan_rounds(st, KW["k_max"], **KW).tolist()
    assert len(plan_rounds(st, 0, **KW)) == 10  # K_max rounds of delta_n each: the budget does not bind
    st3, _ = replay(st, plan_rounds(st, 3, **KW), [np.zeros(6), np.zeros(6)])
    assert len(plan_rounds(st3, 0, **KW)) == KW["k_max"] - 3  # what is left of K_max


def _run(strata, streams, R_per_call, n_explore, n_total, split="prompt-order", **kw):
    """Drive the rescue with R rounds per engine call, drawing each prompt's samples from a fixed stream."""
    st = start_rescue(strata, n_explore, n_total)
    pos = [0] * len(strata)
    used_lists = [[] for _ in strata]
    generated = 0
    while len(plan := plan_rounds(st, R_per_call, split=split, **kw)):
        tot = plan.sum(0)
        new = []
        for p, t in enumerate(tot):
            new.append(streams[p][pos[p]: pos[p] + t])
            pos[p] += t
        generated += int(tot.sum())
        st, used = replay(st, plan, new)
        for p in range(len(strata)):
            used_lists[p].extend(new[p][used[p]].tolist())
    return st, used_lists, generated


def test_speculative_replay_equals_sequential_when_budget_does_not_bind():
    rng = np.random.default_rng(1)
    wasted = 0
    for trial in range(40):
        P = int(rng.integers(1, 9))
        strata = rng.choice([R, L, H], size=P, p=[0.5, 0.25, 0.25])
        streams = [(rng.random(64) < rng.uniform(0, 0.3)).astype(float) for _ in range(P)]
        kw = dict(delta_n=int(rng.integers(1, 4)), n_max=int(rng.integers(10, 33)), k_max=int(rng.integers(1, 11)))
        seq, seq_used, _ = _run(strata, streams, 1, 8, 64, **kw)  # B = 56 P: never binds
        for Rc in (2, 3, 5, 10):
            spec, spec_used, gen = _run(strata, streams, Rc, 8, 64, **kw)
            assert spec.rescued_at.tolist() == seq.rescued_at.tolist()
            assert spec.produced.tolist() == seq.produced.tolist()
            assert spec.rounds_used == seq.rounds_used
            assert spec_used == seq_used
            assert gen - spec.unused == sum(len(u) for u in seq_used)
            wasted += spec.unused
            # curated groups are the same
            rew = [np.concatenate([np.zeros(8), np.asarray(u)]) for u in seq_used]
            a = curate(rew, strata, seq.rescued_at, rng=np.random.default_rng(0))
            b = curate(rew, strata, spec.rescued_at, rng=np.random.default_rng(0))
            assert [x.tolist() for x in a.kept] == [x.tolist() for x in b.kept]
    assert wasted > 0  # speculation really ran past some rescues


def test_speculative_never_exceeds_budget_when_it_binds():
    rng = np.random.default_rng(2)
    for _ in range(30):
        P = int(rng.integers(2, 8))
        strata = np.full(P, R)
        streams = [(rng.random(64) < 0.3).astype(float) for _ in range(P)]
        for Rc in (1, 3):
            st, _, gen = _run(strata, streams, Rc, 8, 10, split="round-robin", delta_n=2, n_max=32, k_max=10)
            assert gen <= 2 * P and st.budget_left >= 0


def test_rescued_in_round_one_gets_no_more_rollouts():
    strata = [R, R]
    streams = [np.array([1.0] + [0.0] * 40), np.zeros(41)]
    st, used, gen = _run(strata, streams, 1, 8, 16, delta_n=2, n_max=32, k_max=10)
    assert len(used[0]) == 2 and st.rescued_at[0] == 8
    assert len(used[1]) == 14  # the rest of B = 16 went to prompt 1 (7 rounds)
    assert st.rounds_used == 7 and gen == 16
