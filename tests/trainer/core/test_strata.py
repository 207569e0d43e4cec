"""Correctness and Stage I strata (trainer/core/strata.py): hand-computed boundaries, and the
module loads without torch (the method registry, the samplers and the evaluator import it)."""

import subprocess
import sys

import numpy as np
import pytest

from trainer.core.strata import Stratum, is_correct, stratify

R, L, H = int(Stratum.RESCUE), int(Stratum.LOW), int(Stratum.HIGH)


def test_is_correct_thresholds_binary_rewards_at_one_half():
    assert is_correct([0, 1, 0.5, 0.51, 0.999999, 1.0, -1.0]).tolist() == [False, True, False, True, True, True, False]
    assert is_correct(np.array([[1.0], [0.0]])).dtype == bool


def test_stratify_paper_defaults():
    assert stratify([0, 1, 3, 4, 5, 8], 8, S=0, tau=0.5).tolist() == [R, L, L, H, H, H]


def test_stratify_boundaries_with_S_and_tau():
    # S = 2: c <= 2 is rescue (c = S included); u = 4/8 = tau exactly is high.
    assert stratify([0, 1, 2, 3, 4, 8], 8, S=2, tau=0.5).tolist() == [R, R, R, L, H, H]
    # tau = 0.75 with n_explore 4: u = 3/4 exactly -> HIGH, 2/4 -> LOW
    assert stratify([2, 3], 4, S=0, tau=0.75).tolist() == [L, H]
    with pytest.raises(ValueError):
        stratify([9], 8, 0, 0.5)


def test_strata_loads_without_torch():
    """Every method, engine and the evaluator import it; the registry must not pull in torch."""
    code = ("import sys, trainer.core.strata, trainer.methods.step, trainer.methods.sampler; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
