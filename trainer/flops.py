"""FLOPs accounting (docs/metrics.md "FLOPs"): the formula every engine and method is charged by.

The count is a formula over sequence lengths, the paper's convention (and verl's): it charges
every trained row its prompt, even where the embedded update computes a shared prompt once per
group (trainer/embedded/update.py), so methods are compared on the same yardstick.
"""

from __future__ import annotations

# --- FLOPs accounting (docs/metrics.md "FLOPs") ----------------------------------------------
# Forward cost of one token at context position p (1-based), after Kaplan et al. 2020 (Table 1):
#   C_fwd(p) = 2 N + 2 n_layer p d_model
# 2N covers every weight matmul (N = all parameters, tied embeddings once, i.e. the LM head; the
# embedding lookup is free); the second term is attention's QK^T and AV against p cached keys.
# Training a token costs 3 forwards (forward + backward = 2x forward); each extra no-grad forward
# (reference-policy log-probs for KL) adds one C_fwd. Rollout tokens are counted per sampled row:
# the row's prompt is prefilled once, then each generated token is one forward.


def sequence_forward_flops(n_params: int, n_layers: int, d_model: int, length: int) -> float:
    """Sum of C_fwd(p) for p = 1..length: 2 N L + 2 n_layer d_model L (L + 1) / 2."""
    return 2.0 * n_params * length + n_layers * d_model * length * (length + 1)


def rollout_flops(n_params: int, n_layers: int, d_model: int, seq_lengths: list[int]) -> float:
    """Generation FLOPs: one forward over prompt + response positions of each sampled row."""
    return sum(sequence_forward_flops(n_params, n_layers, d_model, L) for L in seq_lengths)


def train_flops(n_params: int, n_layers: int, d_model: int, seq_lengths: list[int], extra_forwards: int = 0) -> float:
    """Update FLOPs: (3 + extra_forwards) forwards over every trained sequence (prompt + response)."""
    return (3 + extra_forwards) * rollout_flops(n_params, n_layers, d_model, seq_lengths)
