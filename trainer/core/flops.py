"""FLOPs accounting (docs/metrics.md "FLOPs"): the formula every engine and method is charged by.

The count is a formula over sequence lengths, the paper's convention (and verl's): it charges
every trained row its prompt, even where the embedded update computes a shared prompt once per
group (trainer/embedded/update.py), so methods are compared on the same yardstick.
"""

from __future__ import annotations

import common.metric_keys as mk

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


def wasted_compute(shape: tuple[int, int, int], flops_rollout: float, flops_train: float, gen_response: list[int],
                   train_lengths: list[int], train_response: list[int], zero_advantage: list[bool],
                   extra_forwards: int = 0) -> dict[str, float]:
    """The step's compute that carried no advantage signal (docs/metrics.md "Wasted compute"):
    every generated row that was not trained (curated out, filtered, a rescue rollout after its
    prompt's first success), and every trained row whose advantage is 0 (a zero-variance group
    under GRPO), which is generated and trained for nothing but the entropy and KL terms.

    ``flops_rollout`` / ``flops_train`` are the step's own totals (:func:`rollout_flops` over
    every generated row, :func:`train_flops` over the trained rows). Trained rows are a subset of
    the generated ones and the formulas are sums over rows, so the untrained rows' rollout FLOPs
    are the total less the trained rows'; a zero-advantage row costs one forward to generate and
    ``3 + extra_forwards`` to train. ``shape`` is (N, layers, d_model); ``train_lengths`` prompt +
    response per trained row, ``*_response`` response tokens per row. Returns waste/rollouts,
    waste/tokens (response tokens generated), waste/flops and waste/flops_frac (of the total)."""
    zero = [i for i, z in enumerate(zero_advantage) if z]
    untrained = flops_rollout - rollout_flops(*shape, train_lengths)
    flops = untrained + (4 + extra_forwards) * rollout_flops(*shape, [train_lengths[i] for i in zero])
    total = flops_rollout + flops_train
    return {mk.WASTE_ROLLOUTS: float(len(gen_response) - len(train_lengths) + len(zero)),
            mk.WASTE_TOKENS: float(sum(gen_response) - sum(train_response) + sum(train_response[i] for i in zero)),
            mk.WASTE_FLOPS: float(flops), mk.WASTE_FLOPS_FRAC: float(flops / total) if total else 0.0}


def step_accounting(shape: tuple[int, int, int], *, gen_lengths: list[int], gen_response: list[int],
                    gen_rewards: list[float], gen_truncated: list[bool], train_lengths: list[int],
                    train_response: list[int], train_rewards: list[float], train_advantages: list[float] | None,
                    extra_forwards: int = 0) -> dict[str, float]:
    """One step's generated-vs-trained accounting, the same on every engine (docs/metrics.md):
    rollouts, tokens and FLOPs generated and trained, rewards, response lengths, the truncated
    share, advantages and wasted compute. Each engine only reads its rows into plain lists.

    Args:
        shape: (N parameters, layers, d_model) for the FLOPs formulas.
        gen_lengths / gen_response: prompt + response and response tokens of every generated row.
        gen_truncated: the row stopped at ``max_new_tokens`` without a stop token.
        train_*: the same for the trained rows (empty lists when nothing was trained).
        train_advantages: one advantage per trained row, or None when the engine has none.
    """
    f_roll = rollout_flops(*shape, gen_lengths)
    f_train = train_flops(*shape, train_lengths, extra_forwards)
    n_gen, n_train = len(gen_lengths), len(train_lengths)
    adv = [abs(a) for a in train_advantages] if train_advantages is not None else []
    zero = [a < 1e-8 for a in adv] if train_advantages is not None else [False] * n_train
    m = {
        mk.ROLLOUTS_GENERATED: float(n_gen), mk.ROLLOUTS_TRAINED: float(n_train),
        mk.TOKENS_GENERATED: float(sum(gen_response)), mk.TOKENS_TRAINED: float(sum(train_lengths)),
        mk.TOKENS_RESPONSE_TRAINED: float(sum(train_response)),
        mk.FLOPS_ROLLOUT: f_roll, mk.FLOPS_TRAIN: f_train, mk.FLOPS_TOTAL: f_roll + f_train,
        mk.REWARD_MEAN: sum(gen_rewards) / n_gen if n_gen else 0.0,
        mk.REWARD_TRAINED_MEAN: sum(train_rewards) / n_train if n_train else 0.0,
        mk.RESPONSE_LENGTH_MEAN: sum(gen_response) / n_gen if n_gen else 0.0,
        mk.RESPONSE_TRUNCATED_FRAC: sum(map(bool, gen_truncated)) / n_gen if n_gen else 0.0,
        mk.ADV_ABS_MEAN: sum(adv) / len(adv) if adv else 0.0,
        mk.ADV_ZERO_FRAC: sum(zero) / len(adv) if adv else 1.0,
    }
    m.update(wasted_compute(shape, f_roll, f_train, gen_response, train_lengths, train_response, zero, extra_forwards))
    return m
