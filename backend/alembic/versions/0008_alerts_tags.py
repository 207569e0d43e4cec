"""Alerts: the alert_events table (one row per fired rule of a run) and runs.stop_reason (the
rule that stopped a run early). Tags and notes already live on runs (0001).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = '0008'
down_revision: Union[str, Sequence[str], None] = '0007'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    # plain ALTER TABLE (SQLite >= 3.35 drops a column in place): a batch copy of ``runs`` on
    # SQLite would drop the old table, and its ON DELETE CASCADE children with it
    op.add_column('runs', sa.Column('stop_reason', sa.Text(), nullable=True))
    op.create_table('alert_events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('rule', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('value', sa.Float(), nullable=True),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('stopped', sa.Boolean(), nullable=False),
    sa.Column('delivery', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_alert_events_run_id_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_alert_events')),
    sa.UniqueConstraint('run_id', 'rule', name='uq_alert_events_run_rule')
    )


def downgrade() -> None:
    op.drop_table('alert_events')
    op.drop_column('runs', 'stop_reason')
