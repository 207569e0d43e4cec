"""The ``code`` block belongs to the code task: stored configs of other tasks lose it.

Before, every run config carried a ``code`` block (the sandbox limits), whatever its task, and
every stored config has one. It is the code task's section now (trainer/tasks/code_config.py):
``RunConfig`` holds it exactly when ``task="code"`` and refuses it otherwise, so a stored run of
another task would fail to parse when a worker resumes it. This migration drops the block from
every stored run config whose task is not ``code`` (a config without a ``task`` trained the
default, arithmetic, or its preset's generated task). Code runs keep theirs. Sweep specs are
left as they were asked (a record; posted again, a stray block is refused naming the field).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05

"""
import json
from typing import Any, Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = '0013'
down_revision: Union[str, Sequence[str], None] = '0012'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def without_foreign_code(cfg: Any) -> Any:
    """``cfg`` without its ``code`` block unless its task is the code task."""
    if not isinstance(cfg, dict) or "code" not in cfg or cfg.get("task") == "code":
        return cfg
    return {k: v for k, v in cfg.items() if k != "code"}


def upgrade() -> None:
    bind = op.get_bind()
    t = sa.table("runs", sa.column("id", sa.Integer), sa.column("config", sa.JSON))
    for row_id, value in bind.execute(sa.select(t.c.id, t.c.config)).all():
        old = json.loads(value) if isinstance(value, str) else value
        new = without_foreign_code(old)
        if new != old:
            bind.execute(sa.update(t).where(t.c.id == row_id).values(config=new))


def downgrade() -> None:
    pass  # earlier revisions gave a missing block its defaults, which a non-code run never read
