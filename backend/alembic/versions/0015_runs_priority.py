"""Runs have a priority: ``priority``, 0..10, default 0.

The submitter sets it (``priority`` in POST /api/runs and /api/sweeps), capped by their role
(``AERO_PRIORITY_MAX_ADMIN`` / ``AERO_PRIORITY_MAX_MEMBER``); the workers claim a queue's
higher-priority runs first, before the fair share (backend/db/fair_share.py). Runs stored before
have priority 0, the default.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = '0015'
down_revision: Union[str, Sequence[str], None] = '0014'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column('runs', sa.Column('priority', sa.Integer(), nullable=False, server_default='0'))


def downgrade() -> None:
    # plain DROP COLUMN (SQLite >= 3.35), as 0010 does: a batch table copy would drop the runs table
    # and cascade its metrics away
    op.drop_column('runs', 'priority')
