"""FLOPs formulas against a hand count (docs/metrics.md)."""

import pytest

from trainer.flops import rollout_flops, sequence_forward_flops, train_flops


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
    from trainer.flops import rollout_flops, train_flops, wasted_compute

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
