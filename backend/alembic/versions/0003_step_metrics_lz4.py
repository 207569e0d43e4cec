"""PostgreSQL: compress step_metrics.metrics with lz4 instead of pglz.

A step's JSONB (~70 keys) is just over the TOAST threshold, so it is stored compressed and
every key read decompresses it; lz4 decompresses about twice as fast as the default pglz,
which halves the cost of reading a few keys of a long run. No-op on SQLite, and on a
PostgreSQL server built without lz4.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

"""
from typing import Sequence, Union

from alembic import op
from sqlalchemy import text

revision: str = '0003'
down_revision: Union[str, Sequence[str], None] = '0002'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def _lz4_available(conn) -> bool:
    return bool(conn.execute(text("SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' "
                                  "AND 'lz4' = ANY(enumvals)")).scalar())


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "postgresql" and _lz4_available(conn):
        op.execute("ALTER TABLE step_metrics ALTER COLUMN metrics SET COMPRESSION lz4")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE step_metrics ALTER COLUMN metrics SET COMPRESSION default")
