"""step_details: each step's stored rollout sample and fixed-bin histograms.

One row per (run, step), written by the worker's sink beside the step's metrics
(trainer/platform/step_detail.py says what is sampled). Deleted with the run (cascade) and, on a
resume, past the checkpoint's step, like the step metrics.

The small histograms column comes before the large rollouts column: SQLite reaches a column
past a large value by walking that value's overflow pages, so a heatmap read of 200 steps took
217 ms with the histograms after ~1 MB of rollouts a step, and reads only a few pages with
them first (PostgreSQL keeps large values out of line either way).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision: str = '0007'
down_revision: Union[str, Sequence[str], None] = '0006'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

Id = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')
Json = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')


def upgrade() -> None:
    op.create_table(
        'step_details',
        sa.Column('run_id', Id, nullable=False),
        sa.Column('step', sa.Integer(), nullable=False),
        sa.Column('histograms', Json, nullable=False),  # before the rollouts: see the module docstring
        sa.Column('rollouts', Json, nullable=False),
        sa.Column('logged_at', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_step_details_run_id_runs'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('run_id', 'step', name=op.f('pk_step_details')),
    )


def downgrade() -> None:
    op.drop_table('step_details')
