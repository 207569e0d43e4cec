"""Runs record their placement: the GPUs they hold, what they wait for, where they train.

``gpus`` (resources.gpus_per_node x resources.nodes, trainer/spec/resources.py) is what the
``AERO_QUOTA_RUNNING_GPUS`` quota counts; ``waiting_for`` says what a claimed run waits for
before its first step; ``placement`` is the Ray cluster, nodes and GPU ids it was given. Runs
stored before hold 0 GPUs (they were placed by nothing).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision: str = '0010'
down_revision: Union[str, Sequence[str], None] = '0009'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column('runs', sa.Column('gpus', sa.Integer(), nullable=False, server_default='0'))
    op.add_column('runs', sa.Column('waiting_for', sa.Text(), nullable=True))
    op.add_column('runs', sa.Column('placement', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'),
                                   nullable=True))


def downgrade() -> None:
    # plain DROP COLUMN (SQLite >= 3.35), as 0008 does: a batch table copy would drop the runs table
    # and cascade its metrics away
    for column in ('placement', 'waiting_for', 'gpus'):
        op.drop_column('runs', column)
