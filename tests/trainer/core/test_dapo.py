import torch

from trainer.core.dapo import nonzero_variance_mask, overlong_penalty


def test_nonzero_variance_mask():
    r = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.5, 0.5, 0.0, 0.0])
    g = torch.tensor([0, 0, 1, 1, 2, 3, 3, 4, 4])
    m = nonzero_variance_mask(r, g)
    assert m.tolist() == [False, False, True, True, False, False, False, False, False]


def test_nonzero_variance_mask_unsorted_ids():
    m = nonzero_variance_mask(torch.tensor([1, 0, 1, 1]), torch.tensor([7, 3, 3, 7]))
    assert m.tolist() == [False, True, True, False]


def test_overlong_penalty_values():
    L = torch.tensor([5, 8, 9, 10, 12, 13])
    p = overlong_penalty(L, max_len=12, buffer=4, penalty=1.0)
    assert torch.allclose(p, torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0, -1.0]))
    p = overlong_penalty(L, max_len=12, buffer=4, penalty=0.5)
    assert torch.allclose(p, torch.tensor([0.0, 0.0, -0.125, -0.25, -0.5, -0.5]))


def test_overlong_penalty_buffer_zero_is_off_within_cap():
    p = overlong_penalty(torch.tensor([1, 12, 13]), max_len=12, buffer=0, penalty=1.0)
    assert p.tolist() == [0.0, 0.0, -1.0]
