"""Dr.GRPO has one route: stored GRPO runs with Dr.GRPO's estimator become drgrpo runs.

A run stored as ``method="grpo"`` with ``adv_estimator="drgrpo"`` trained Dr.GRPO's advantages
(r - mean, no std) with GRPO's loss aggregation. The config now refuses that pair and names the
``drgrpo`` method, so such a run would fail to parse when a worker resumes it, and it would
show under a second label in every comparison. This migration makes each one a ``drgrpo`` run
that trains exactly as before: its ``loss_agg`` is written out (GRPO's default,
``seq-mean-token-mean``, when it had none), since drgrpo's own default differs. The ``method``
column follows the config. Sweep specs are left as they were asked (they are a record; a sweep
posted again with that pair gets the refusal naming the setting to use).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05

"""
import json
from typing import Any, Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = '0011'
down_revision: Union[str, Sequence[str], None] = '0010'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

GRPO_LOSS_AGG = "seq-mean-token-mean"  # GRPO's default aggregation when the run named none


def as_drgrpo(cfg: Any) -> Any:
    """``cfg`` as the drgrpo run it trained as, or unchanged when it is not GRPO with Dr.GRPO's
    estimator."""
    if not isinstance(cfg, dict) or cfg.get("method") != "grpo" or cfg.get("adv_estimator") != "drgrpo":
        return cfg
    return {**cfg, "method": "drgrpo", "loss_agg": cfg.get("loss_agg") or GRPO_LOSS_AGG}


def upgrade() -> None:
    bind = op.get_bind()
    t = sa.table("runs", sa.column("id", sa.Integer), sa.column("method", sa.String), sa.column("config", sa.JSON))
    for row_id, value in bind.execute(sa.select(t.c.id, t.c.config)).all():
        old = json.loads(value) if isinstance(value, str) else value
        new = as_drgrpo(old)
        if new != old:
            bind.execute(sa.update(t).where(t.c.id == row_id).values(config=new, method=new["method"]))


def downgrade() -> None:
    pass  # a drgrpo run with an explicit loss_agg trains the same under every revision
