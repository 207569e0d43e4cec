"""FLOPs formulas against a hand count (docs/metrics.md)."""

import pytest

from trainer.core.flops import rollout_flops, sequence_forward_flops, train_flops

pytestmark = pytest.mark.unit  # a formula: the unit tier, though tests/trainer/core/ is the engine's


def test_sequence_forward_flops_hand_count():
    # N=1000 params, 2 layers, d=8, L=3 positions: sum_p (2N + 2*2*p*8) = 3*2000 + 32*(1+2+3)
    assert sequence_forward_flops(1000, 2, 8, 3) == 6000 + 32 * 6


def test_rollout_and_train_flops():
    lens = [3, 5]
    roll = rollout_flops(1000, 2, 8, lens)
    assert roll == sequence_forward_flops(1000, 2, 8, 3) + sequence_forward_flops(1000, 2, 8, 5)
    assert train_flops(1000, 2, 8, lens) == 3 * roll  # forward + backward (2x forward)
    assert train_flops(1000, 2, 8, lens, extra_forwards=1) == 4 * roll  # + reference-policy forward


def test_wasted_compute_counts_untrained_rows_and_zero_advantage_rows():
    from trainer.core.flops import rollout_flops, train_flops, wasted_compute

    shape = (100, 2, 8)
    gen, gen_resp = [10, 12, 8, 9], [5, 7, 3, 4]  # rows 2 and 3 (8 and 9 tokens) are not trained
    tr, tr_resp, zero = [10, 12], [5, 7], [False, True]  # the 12-token row is trained with advantage 0

    def waste(train, train_resp, zeros, extra=0):
        return wasted_compute(shape, rollout_flops(*shape, gen), train_flops(*shape, train, extra), gen_resp, train,
                              train_resp, zeros, extra)

    w = waste(tr, tr_resp, zero, extra=1)
    assert w["waste/rollouts"] == 3 and w["waste/tokens"] == 3 + 4 + 7
    by_hand = rollout_flops(*shape, [8, 9]) + rollout_flops(*shape, [12]) + train_flops(*shape, [12], 1)
    assert w["waste/flops"] == pytest.approx(by_hand, rel=1e-12)
    assert w["waste/flops_frac"] == pytest.approx(by_hand / (rollout_flops(*shape, gen) + train_flops(*shape, tr, 1)))
    everything_trained = waste(gen, gen_resp, [False] * 4)
    assert everything_trained == {"waste/rollouts": 0.0, "waste/tokens": 0.0, "waste/flops": 0.0, "waste/flops_frac": 0.0}
    nothing = waste([], [], [])
    assert nothing["waste/rollouts"] == 4 and nothing["waste/flops_frac"] == 1.0


def test_step_accounting_is_one_function_of_the_rows():
    from trainer.core.flops import step_accounting

    shape = (1000, 2, 16)
    m = step_accounting(shape, gen_lengths=[8, 8, 3, 6], gen_response=[5, 5, 1, 4], gen_rewards=[1, 0, 0, 1],
                        gen_truncated=[False, True, False, False], train_lengths=[8, 6], train_response=[5, 4],
                        train_rewards=[1, 1], train_advantages=[0.5, -0.0], extra_forwards=1)
    assert (m["rollout/generated"], m["rollout/trained"], m["tokens/generated"], m["tokens/trained"]) == (4, 2, 15, 14)
    assert m["flops/rollout"] == rollout_flops(*shape, [8, 8, 3, 6]) and m["flops/train"] == train_flops(*shape, [8, 6], 1)
    assert m["flops/total"] == m["flops/rollout"] + m["flops/train"]
    assert (m["reward/mean"], m["reward/trained_mean"], m["response/length_mean"]) == (0.5, 1.0, 3.75)
    assert (m["response/truncated_frac"], m["adv/abs_mean"], m["adv/zero_frac"]) == (0.25, 0.25, 0.5)
    assert m["waste/rollouts"] == 3  # two untrained rows and one zero-advantage trained row
    none = step_accounting(shape, gen_lengths=[], gen_response=[], gen_rewards=[], gen_truncated=[], train_lengths=[],
                           train_response=[], train_rewards=[], train_advantages=None)
    assert (none["rollout/generated"], none["response/truncated_frac"], none["adv/zero_frac"], none["flops/total"]) == \
        (0, 0.0, 1.0, 0.0)
