"""``INSERT ... ON CONFLICT DO UPDATE`` on both supported stores (PostgreSQL and SQLite
dialect inserts), in batches: the idempotent write every metric table uses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

BATCH_ROWS = 500  # rows per INSERT statement (SQLite's bound-parameter limit leaves room)


def dialect_insert(session: Session):
    """The ``insert`` construct of the session's dialect (it has ``on_conflict_do_update``)."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:  # pragma: no cover - only the two supported stores
        raise NotImplementedError(f"upsert on {dialect}")
    return insert


def upsert(session: Session, model, rows: list[dict[str, Any]], keys: Sequence[str], batch: int = BATCH_ROWS) -> int:
    """INSERT rows, updating every non-key column on conflict with ``keys``. Returns row count.

    One Core statement executed with many parameter sets (the driver's executemany; psycopg
    pipelines them): SQLAlchemy compiles it once and caches it, where a ``.values(rows)``
    statement was compiled anew for every call, ~0.1 ms of CPU per row."""
    if not rows:
        return 0
    insert = dialect_insert(session)(model.__table__)
    stmt = insert.on_conflict_do_update(index_elements=list(keys), set_={c: insert.excluded[c] for c in rows[0] if c not in keys})
    conn = session.connection()
    for i in range(0, len(rows), batch):
        conn.execute(stmt, rows[i : i + batch])
    return len(rows)
