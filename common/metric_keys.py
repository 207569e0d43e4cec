"""The metric keys more than one package reads or writes, named once (stdlib only).

The trainer logs a step's metrics as one flat dict (``sink.log(step, metrics)``); the backend
stores it as JSON, and the backend's services, the dashboard and the CLI read keys back by
name. A key spelled differently on one side is a chart that silently stays empty, so the keys
they share live here. Keys only one module uses (a collector's own ``aero/*`` stats, verl's
renamed timings) stay where they are written. Every key's meaning: docs/metrics.md.

Stdlib only, importing nothing, so the dashboard (HTTP only, no trainer code) and the
torch-free backend may import it.
"""

from __future__ import annotations

# -- time (seconds; evaluation excluded) ---------------------------------------------------------
STEP_S = "time/step_s"  # wall-clock of one training step
ELAPSED_S = "time/elapsed_s"  # cumulative training seconds, resumed runs included
ROLLOUT_S = "time/rollout_s"
REWARD_S = "time/reward_s"
TRAIN_S = "time/train_s"
# asynchronous training (offpolicy.max_staleness > 0): how long each side waited for the other
SAMPLER_IDLE_S = "time/sampler_idle_s"  # the sampler thread, waiting for the version its step samples with
TRAINER_IDLE_S = "time/trainer_idle_s"  # the trainer, waiting for the sampler's step

# -- asynchronous training (trainer/core/importance.py) ------------------------------------------
STALENESS_MEAN = "offpolicy/staleness_mean"  # versions between a trained row's sampler and the trainer
STALENESS_MAX = "offpolicy/staleness_max"
IS_WEIGHT_MEAN = "offpolicy/is_weight_mean"  # token mean of pi_old / mu before the cap
IS_CAPPED_FRAC = "offpolicy/is_capped_frac"  # tokens whose weight exceeds the cap (tis truncates, mis masks)

# -- compute -----------------------------------------------------------------------------------
FLOPS_TOTAL = "flops/total"  # per step: rollout + train (readers sum it for cumulative curves)
FLOPS_ROLLOUT = "flops/rollout"
FLOPS_TRAIN = "flops/train"
TOKENS_GENERATED = "tokens/generated"
TOKENS_TRAINED = "tokens/trained"
ROLLOUTS_GENERATED = "rollout/generated"
ROLLOUTS_TRAINED = "rollout/trained"
GEN_CALLS = "rollout/gen_calls"  # engine calls this step
PROMPTS_USED = "prompts/used"  # training-stream prompts consumed
TOKENS_RESPONSE_TRAINED = "tokens/response_trained"  # the response tokens the loss covers
RESPONSE_LENGTH_MEAN = "response/length_mean"  # over every generated rollout
RESPONSE_TRUNCATED_FRAC = "response/truncated_frac"  # generated rows cut without a stop token
# compute with no advantage signal (trainer/core/flops.py::wasted_compute): untrained generated rows and
# trained zero-advantage rows; per step, as the FLOPs above
WASTE_ROLLOUTS = "waste/rollouts"
WASTE_TOKENS = "waste/tokens"  # their response tokens
WASTE_FLOPS = "waste/flops"
WASTE_FLOPS_FRAC = "waste/flops_frac"  # of flops/total

# -- reward and learning signal ------------------------------------------------------------------
REWARD_MEAN = "reward/mean"  # over every generated rollout
REWARD_TRAINED_MEAN = "reward/trained_mean"  # over the curated, trained rollouts
ZERO_ACC_AFTER_EXPLORE = "zero_acc/after_explore"  # fraction of prompts with no correct rollout
ZERO_ACC_AFTER_RESCUE = "zero_acc/after_rescue"
ALL_CORRECT_RATIO = "all_correct/ratio"
ADV_ZERO_FRAC = "adv/zero_frac"
ADV_ABS_MEAN = "adv/abs_mean"
STRATA_HIGH = "strata/high"
STRATA_LOW = "strata/low"
STRATA_RESCUE = "strata/rescue"
TRAIN_ENTROPY = "train/entropy"
TRAIN_GRAD_NORM = "train/grad_norm"
TRAIN_KL = "train/kl"

# -- AERO's savings ledger (per step; docs/algorithms.md) -----------------------------------------
SAVINGS_PREFIX = "savings/"
SAVINGS_STRATEGIES = ("s1", "s2", "s3")
SAVINGS_UNITS = ("rollouts", "tokens", "flops", "s")


def savings_key(who: str, unit: str) -> str:
    """``savings/<who>_<unit>``: what strategy ``who`` (s1, s2, s3) saved, or GRPO's cost at
    the same budget (``who="grpo"``), in ``unit`` (rollouts, tokens, flops, s)."""
    return f"{SAVINGS_PREFIX}{who}_{unit}"


SAVINGS_GRPO_ROLLOUTS = savings_key("grpo", "rollouts")
SAVINGS_GRPO_TOKENS = savings_key("grpo", "tokens")
SAVINGS_KEYS = tuple(savings_key(s, u) for s in SAVINGS_STRATEGIES for u in SAVINGS_UNITS)

# -- evaluation (GET /runs/{id}/evals; curve keys of /compare/curves) ----------------------------
OVERALL = "overall"  # the pseudo-benchmark pooling every benchmark's problems
AVG_AT_K = "avg_at_k"
PASS_AT_K = "pass_at_k"
EVAL_METRICS = (AVG_AT_K, PASS_AT_K)
EVAL_PREFIX = "eval/"


def eval_key(benchmark: str, metric: str = AVG_AT_K) -> str:
    """``eval/<benchmark>/<metric>``: an evaluation named as a curve key."""
    return f"{EVAL_PREFIX}{benchmark}/{metric}"


EVAL_HEADLINE = eval_key(OVERALL, AVG_AT_K)  # held-out Avg@k pooled over benchmarks: the paper's headline
