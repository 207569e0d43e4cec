"""FLOPs formulas against a hand count (docs/metrics.md)."""

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
