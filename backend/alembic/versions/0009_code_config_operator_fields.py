"""Stored run configs lose the code sandbox's operator settings.

Before the operator's run policy existed, a run config's ``code`` section carried the
sandbox's isolation (``network``), uid (``run_as_uid``) and interpreter (``python``). They are
the operator's settings now (AERO_SANDBOX_ISOLATION, AERO_SANDBOX_UID, AERO_SANDBOX_PYTHON) and
RunConfig refuses them. This migration drops them from every stored run config and sweep base
(and a sweep's overrides), so a run stored before still parses when a worker takes or resumes it.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04

"""
import json
from typing import Any, Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = '0009'
down_revision: Union[str, Sequence[str], None] = '0008'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

OPERATOR_FIELDS = ("network", "run_as_uid", "python")


def _without_operator_fields(cfg: Any) -> Any:
    """``cfg`` (a run config or a sweep override) without the three fields, nested
    (``{"code": {...}}``) or dotted (``{"code.network": ...}``); anything else unchanged."""
    if not isinstance(cfg, dict):
        return cfg
    out = {k: v for k, v in cfg.items() if k not in {f"code.{f}" for f in OPERATOR_FIELDS}}
    if isinstance(out.get("code"), dict):
        out["code"] = {k: v for k, v in out["code"].items() if k not in OPERATOR_FIELDS}
    return out


def _rewrite(bind, table: str, column: str, rewrite) -> None:
    t = sa.table(table, sa.column("id", sa.Integer), sa.column(column, sa.JSON))
    for row_id, value in bind.execute(sa.select(t.c.id, t.c[column])).all():
        old = json.loads(value) if isinstance(value, str) else value
        new = rewrite(old)
        if new != old:
            bind.execute(sa.update(t).where(t.c.id == row_id).values({column: new}))


def _sweep_spec(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec
    out = {**spec, "base": _without_operator_fields(spec.get("base"))} if "base" in spec else dict(spec)
    if isinstance(spec.get("overrides"), list):
        out["overrides"] = [_without_operator_fields(o) for o in spec["overrides"]]
    return out


def upgrade() -> None:
    bind = op.get_bind()
    _rewrite(bind, "runs", "config", _without_operator_fields)
    _rewrite(bind, "sweeps", "spec", _sweep_spec)


def downgrade() -> None:
    pass  # the dropped values were ignored by every revision since the operator's policy
