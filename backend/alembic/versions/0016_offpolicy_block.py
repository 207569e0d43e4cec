"""Stored run configs carry the ``offpolicy`` block (asynchronous training), with its defaults.

A run config stored whole (``RunConfig.model_dump``: it has every block, ``optim`` among them)
before the block existed trained synchronously; this migration writes what that means,
``{"max_staleness": 0, "correction": "tis", "is_cap": 2.0}``, so a seed group (keyed by the
seed-less stored config, backend/services/groups.py) holds an older run and a new synchronous
run of the same config together. Partial configs (a sweep's base and overrides) are left as
they are: parsing fills the defaults. A config that has the block keeps it. Downgrade drops the
block (an older revision refuses it).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07

"""
import json
from typing import Any, Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = '0016'
down_revision: Union[str, Sequence[str], None] = '0015'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BLOCK = "offpolicy"
SYNCHRONOUS = {"max_staleness": 0, "correction": "tis", "is_cap": 2.0}


def with_block(cfg: Any) -> Any:
    if not isinstance(cfg, dict) or BLOCK in cfg or "optim" not in cfg:  # not a whole stored config
        return cfg
    return {**cfg, BLOCK: dict(SYNCHRONOUS)}


def without_block(cfg: Any) -> Any:
    if not isinstance(cfg, dict) or BLOCK not in cfg:
        return cfg
    return {k: v for k, v in cfg.items() if k != BLOCK}


def _rewrite(rewrite) -> None:
    bind = op.get_bind()
    t = sa.table("runs", sa.column("id", sa.Integer), sa.column("config", sa.JSON))
    for row_id, value in bind.execute(sa.select(t.c.id, t.c.config)).all():
        old = json.loads(value) if isinstance(value, str) else value
        new = rewrite(old)
        if new != old:
            bind.execute(sa.update(t).where(t.c.id == row_id).values(config=new))


def upgrade() -> None:
    _rewrite(with_block)


def downgrade() -> None:
    _rewrite(without_block)
