"""AERO's rescue on a continuous batch (trainer/core/rescue_stream.py) against separate calls
(trainer/methods/aero.py's explore_and_rescue_calls): per prompt, the same rollouts count, the same
rescue, rounds, unused rollouts and budget left, whatever order the blocks finish in, with the
budget binding or not, for every window size and budget split.

A rollout's correctness here is a fixed function of (prompt, its index among the prompt's
rollouts), as a per-row keyed sampler makes a rollout's tokens; blocks of the stream finish in a
random order, as rows of different lengths do."""

import numpy as np
import pytest

from trainer.spec.config import parse_run_config
from trainer.methods.aero import explore_and_rescue_calls, explore_and_rescue_stream
from trainer.methods.sampler import Samples


class TableSampler:
    """A Sampler whose rollout k of prompt p is correct iff ``table[p, k]``; rows are tagged (p, k)."""

    def __init__(self, table: np.ndarray, order_seed: int):
        self.table, self.P = table, table.shape[0]
        self.next_k = np.zeros(self.P, dtype=np.int64)
        self.tags: list[tuple[int, int]] = []  # per global row id
        self.order = np.random.default_rng(order_seed)
        self.state: dict = {}

    def _rows(self, p: int, n: int):
        ks = list(range(int(self.next_k[p]), int(self.next_k[p]) + n))
        self.next_k[p] += n
        return ks

    def _samples(self, first: int, pk: list[tuple[int, int]]) -> Samples:
        correct = [float(self.table[p, k]) for p, k in pk]
        return Samples.build(first, [p for p, _ in pk], correct, [3] * len(pk), [5] * len(pk))

    def sample(self, counts, round_):
        pk = [(p, k) for p in range(self.P) for k in self._rows(p, int(counts[p]))]
        first = len(self.tags)
        self.tags += pk
        return self._samples(first, pk)

    def stream(self, first, react):
        flight, parts = [], []

        def ask(asks):
            for p, n, _round in asks:
                if n > 0:
                    pk = [(p, k) for k in self._rows(p, n)]
                    flight.append((len(self.tags), pk, _round))
                    self.tags += pk

        ask([(p, n, 0) for p, n in enumerate(first)])
        while flight:  # a block in flight finishes: any of them
            start, pk, round_ = flight.pop(int(self.order.integers(len(flight))))
            part = self._samples(start, pk)
            parts.append(part)
            ask(react(part, round_))
        return sorted(parts, key=lambda s: s.first_row)


def run(mode, cfg, table, may, budget, order_seed=0, n_first=None):
    s = TableSampler(table, order_seed)
    fn = explore_and_rescue_stream if mode == "stream" else explore_and_rescue_calls
    if n_first is None:
        n_first = np.full(table.shape[0], cfg.aero.n_explore, dtype=np.int64)
    log, rows_of, correct, state, calls = fn(cfg, s, n_first, may, budget)
    assert len(log) == len(s.tags)
    return dict(rows=[[s.tags[i] for i in r.tolist()] for r in rows_of], correct=correct.tolist(),
                rescued_at=state.rescued_at.tolist(), produced=state.produced.tolist(), rounds=state.rounds_used,
                unused=state.unused, budget_left=state.budget_left, generated=len(s.tags)), calls


@pytest.mark.parametrize("case", range(120))
def test_stream_equals_calls(case):
    g = np.random.default_rng(case)
    P = int(g.integers(1, 12))
    n_explore = int(g.integers(1, 5))
    n_total = n_explore + int(g.integers(0, 5))
    aero = dict(n_explore=n_explore, n_max=int(n_explore + g.integers(0, 12)), delta_n=int(g.integers(1, 4)),
                k_max=int(g.integers(0, 6)), rounds_per_call=int(g.integers(0, 4)),
                budget_split=str(g.choice(["prompt-order", "round-robin"])))
    cfg = parse_run_config({"preset": "tiny", "method": "aero", "n_total": max(n_total, 2),
                            "aero": aero, "rollout": {"rng": "per-row", "schedule": "continuous"}})
    hard = g.random(P) < g.random()  # prompts almost never right
    table = g.random((P, 64)) < np.where(hard, 0.02, g.uniform(0.05, 0.6, size=P))[:, None]
    may = g.random(P) < 0.9
    budget = (cfg.n_total - n_explore) * P
    n_first = None
    if case % 2:  # aero-mem's hooks: each prompt's own first call, a pool of its own
        n_first = g.integers(1, cfg.aero.n_max + 2, size=P)
        budget = int(g.integers(0, 31))
    ref, calls = run("calls", cfg, table, may, budget, n_first=n_first)
    for order_seed in range(3):
        got, one = run("stream", cfg, table, may, budget, order_seed, n_first=n_first)
        assert got == ref, (aero, order_seed)
        assert one == 1
    if calls > 1:
        assert ref["generated"] > (P * n_explore if n_first is None else n_first.sum())


def test_the_budget_binding_waits_for_the_batch_and_a_loose_one_does_not():
    """With room for every prompt's most, rescue starts per prompt while others explore; with a
    binding budget, rescue is planned for the whole batch (the split in prompt order decides)."""
    from trainer.core.rescue_stream import RescueRules, RescueStream

    rules = RescueRules(S=0, tau=0.5, rounds=1, delta_n=2, n_max=8, k_max=3, split="prompt-order")
    loose = RescueStream(np.ones(4, bool), np.full(4, 2), budget=4 * 6, rules=rules)
    assert loose.explored(0, 0) == [(0, 2, 1)]  # prompt 0 rescued at once: 4 prompts x 6 fit the budget
    tight = RescueStream(np.ones(4, bool), np.full(4, 2), budget=5, rules=rules)
    assert tight.explored(0, 0) == [] and tight.explored(1, 1) == [] and tight.explored(2, 0) == []
    asks = tight.explored(3, 0)  # the last exploration: the window of the whole batch, budget split
    assert asks == [(0, 2, 1), (2, 2, 1), (3, 1, 1)] and tight.global_windows == 1


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_a_prompt_without_exploration_is_rescued_as_separate_calls_rescue_it():
    """n_first = 0 (never asked of the stream by aero-mem, whose live prompts explore): the step
    falls back to separate calls, which rescue it (0 of 0 correct is the rescue stratum)."""
    cfg = parse_run_config({"preset": "tiny", "method": "aero", "rollout": {"rng": "per-row", "schedule": "continuous"},
                            "aero": {"n_explore": 2}})
    table = np.zeros((3, 64), dtype=bool)
    table[1, 5] = True
    n_first = np.array([2, 0, 2])
    ref, _ = run("calls", cfg, table, np.ones(3, bool), 40, n_first=n_first)
    got, calls = run("stream", cfg, table, np.ones(3, bool), 40, n_first=n_first)
    assert got == ref and ref["rescued_at"][1] == 5 and calls >= 2
