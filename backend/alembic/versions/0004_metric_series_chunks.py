"""metric_chunks and metric_series: a columnar copy of step_metrics, built from the rows stored.

Plots read a few keys over thousands of steps; from step_metrics that meant opening every
step's JSON (backend/db/series.py says why and how the copy is laid out). This migration
creates the two tables and fills them from every run's step_metrics, chunk by chunk, with
the chunk size the code uses (128 steps; kept here as a literal so that this migration
builds the same chunks whatever the code says later). On PostgreSQL the arrays are
compressed with lz4 where the server has it, as step_metrics is (0003).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

"""
from typing import Sequence, Union

from alembic import op
import orjson
import sqlalchemy as sa

revision: str = '0004'
down_revision: Union[str, Sequence[str], None] = '0003'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

CHUNK_STEPS = 128
Id = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def _encode(values) -> str:
    try:
        return orjson.dumps(values).decode()
    except TypeError:  # an int beyond 64 bits
        import json

        return json.dumps(values)


def _chunk_rows(run_id: int, chunk: int, rows: list) -> tuple[dict, list[dict]]:
    """The metric_chunks row and metric_series rows of one chunk's (step, metrics) rows."""
    keys = dict.fromkeys(k for _, m in rows for k in m)
    series = []
    for k in keys:
        values = [m.get(k) for _, m in rows]
        while values and values[-1] is None:
            values.pop()
        series.append({"run_id": run_id, "key": k, "chunk": chunk, "data": _encode(values)})
    return {"run_id": run_id, "chunk": chunk, "steps": _encode([s for s, _ in rows])}, series


def _backfill(conn) -> None:
    step_metrics = sa.table("step_metrics", sa.column("run_id", Id), sa.column("step", sa.Integer()),
                            sa.column("metrics", sa.JSON()))
    chunks = sa.table("metric_chunks", sa.column("run_id"), sa.column("chunk"), sa.column("steps"))
    series = sa.table("metric_series", sa.column("run_id"), sa.column("key"), sa.column("chunk"), sa.column("data"))
    run_ids = conn.execute(sa.select(step_metrics.c.run_id).distinct()).scalars().all()
    for run_id in run_ids:
        q = sa.select(step_metrics.c.step, step_metrics.c.metrics).where(step_metrics.c.run_id == run_id).order_by(step_metrics.c.step)
        by_chunk: dict[int, list] = {}
        for step, metrics in conn.execute(q):
            by_chunk.setdefault(step // CHUNK_STEPS, []).append((step, metrics))
        chunk_rows, series_rows = [], []
        for c, rows in by_chunk.items():
            head, body = _chunk_rows(run_id, c, rows)
            chunk_rows.append(head)
            series_rows += body
        for i in range(0, len(chunk_rows), 500):
            conn.execute(chunks.insert(), chunk_rows[i:i + 500])
        for i in range(0, len(series_rows), 500):
            conn.execute(series.insert(), series_rows[i:i + 500])


def _lz4_available(conn) -> bool:
    return bool(conn.execute(sa.text("SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' "
                                     "AND 'lz4' = ANY(enumvals)")).scalar())


def upgrade() -> None:
    op.create_table('metric_chunks',
    sa.Column('run_id', Id, nullable=False),
    sa.Column('chunk', sa.Integer(), nullable=False),
    sa.Column('steps', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_metric_chunks_run_id_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'chunk', name=op.f('pk_metric_chunks'))
    )
    op.create_table('metric_series',
    sa.Column('run_id', Id, nullable=False),
    sa.Column('key', sa.Text(), nullable=False),
    sa.Column('chunk', sa.Integer(), nullable=False),
    sa.Column('data', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_metric_series_run_id_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'key', 'chunk', name=op.f('pk_metric_series'))
    )
    conn = op.get_bind()
    if conn.dialect.name == "postgresql" and _lz4_available(conn):
        op.execute("ALTER TABLE metric_chunks ALTER COLUMN steps SET COMPRESSION lz4")
        op.execute("ALTER TABLE metric_series ALTER COLUMN data SET COMPRESSION lz4")
    _backfill(conn)


def downgrade() -> None:
    op.drop_table('metric_series')
    op.drop_table('metric_chunks')
