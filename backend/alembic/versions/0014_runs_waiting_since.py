"""Runs record since when they wait for their GPUs: ``waiting_since``.

A claimed run that waits for its GPUs (``waiting_for`` set, trainer/platform/placement.py) is listed as
waiting, with how long it has waited; ``waiting_since`` is when it started waiting, cleared with
``waiting_for`` once placed or finished. A run waiting while this migration runs is taken to wait
since it started (a run waits before its first step).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = '0014'
down_revision: Union[str, Sequence[str], None] = '0013'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column('runs', sa.Column('waiting_since', sa.DateTime(), nullable=True))
    op.execute("UPDATE runs SET waiting_since = COALESCE(started_at, created_at) WHERE waiting_for IS NOT NULL")


def downgrade() -> None:
    # plain DROP COLUMN (SQLite >= 3.35), as 0010 does: a batch table copy would drop the runs table
    # and cascade its metrics away
    op.drop_column('runs', 'waiting_since')
