"""runs.config keeps only the config sections its method reads.

Before this revision every stored run config carried every method's section (``aero``,
``aero_mem``, ``dapo``), whatever its method; a config now holds exactly its method's
(trainer/spec/config.py refuses a GRPO config with an ``aero`` block). This migration drops the
others from every stored run, so a queued run written before it still parses when a worker
takes it, and a finished one still opens. The method -> sections table is written out here as
it stood at this revision, so this migration does the same whatever the registry says later;
a method it does not know keeps its config unchanged.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

"""
import json
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = '0005'
down_revision: Union[str, Sequence[str], None] = '0004'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

SECTIONS = ("aero", "aero_mem", "dapo")
_AERO, _MEM = ("aero",), ("aero", "aero_mem")
READS = {"grpo": (), "drgrpo": (), "dapo": ("dapo",), "aero": _AERO, "aero-s1": _AERO, "aero-s1s2": _AERO,
         **{m: _MEM for m in ("aero-mem", "aero-mem-a", "aero-mem-b", "aero-mem-c", "aero-mem-d", "aero-mem-abd")}}


def upgrade() -> None:
    bind = op.get_bind()
    runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("config", sa.JSON))
    for run_id, config in bind.execute(sa.select(runs.c.id, runs.c.config)).all():
        cfg = json.loads(config) if isinstance(config, str) else config
        if not isinstance(cfg, dict) or cfg.get("method", "aero") not in READS:
            continue
        own = READS[cfg.get("method", "aero")]
        kept = {k: v for k, v in cfg.items() if k not in SECTIONS or k in own}
        if kept != cfg:
            bind.execute(sa.update(runs).where(runs.c.id == run_id).values(config=kept))


def downgrade() -> None:
    pass  # the dropped sections held only values their method never read
