"""Dr.GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): GRPO without its two
length and difficulty biases. The worked example of docs/architecture.md "Adding a method":
this file and its tests are the whole change.

Collection is GRPO's (n_total rollouts per prompt, all trained). Advantages are the ``drgrpo``
estimator's (trainer/core/estimators.py), A_i = r_i - mean_g(r), never divided by the group
std, whatever ``adv_estimator`` says; the loss sums tokens per sequence and divides by a
constant (``seq-mean-token-sum-norm``) instead of by each response's length. This is Dr.GRPO's
one route: ``method="grpo"`` with ``adv_estimator="drgrpo"`` is refused at submit, naming this
method (``route_of``; with ``loss_agg="seq-mean-token-mean"`` for GRPO's aggregation), and runs
stored that way were migrated to it (Alembic 0011).
"""

from __future__ import annotations

from trainer.methods.grpo import grpo_step
from trainer.methods.spec import BOTH_ENGINES, Display, MethodSpec, Needs, VerlMapping, register

DRGRPO = register(MethodSpec(
    name="drgrpo", family="grpo", loss_agg="seq-mean-token-sum-norm", estimator="drgrpo", route_of="grpo",
    display=Display("Dr.GRPO", "#54A24B", "Dr.GRPO (GRPO without std normalisation or length normalisation)",
                    order=30),
    needs=Needs(engines=BOTH_ENGINES), verl=VerlMapping(stock_fit=True),  # verl's GRPO with Dr.GRPO's settings
), grpo_step)
