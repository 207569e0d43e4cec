"""Stored run configs name the sampler ``sampler`` (``hf`` | ``vllm``), not ``rollout_engine``.

``rollout_engine`` ("embedded" | "vllm") chose what generates a run's rollouts, and its
"embedded" also named a training engine (``engine``). The field is ``sampler`` now, "embedded"
being "hf" (transformers' KV-cache sampling). RunConfig still reads the old field with a
deprecation warning; this migration rewrites every stored run config and sweep (its base and
its overrides, dotted or nested: the field is a top-level one either way) to the new field, so
stored configs say what every new one says. A config that also has ``sampler`` keeps it.
Downgrade writes the old field back (an older revision refuses ``sampler``).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06

"""
import json
from typing import Any, Callable, Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = '0012'
down_revision: Union[str, Sequence[str], None] = '0011'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

OLD, NEW = "rollout_engine", "sampler"
TO_NEW = {"embedded": "hf", "vllm": "vllm"}
TO_OLD = {new: old for old, new in TO_NEW.items()}


def _renamed(cfg: Any, old: str, new: str, values: dict[str, str]) -> Any:
    """``cfg`` (a run config or a sweep override) with ``old`` moved to ``new`` and its value
    mapped (a value not in ``values`` is kept as it was); anything else unchanged."""
    if not isinstance(cfg, dict) or old not in cfg:
        return cfg
    out = {k: v for k, v in cfg.items() if k != old}
    if new not in out:
        out[new] = values.get(cfg[old], cfg[old]) if isinstance(cfg[old], str) else cfg[old]
    return out


def to_sampler(cfg: Any) -> Any:
    return _renamed(cfg, OLD, NEW, TO_NEW)


def to_rollout_engine(cfg: Any) -> Any:
    return _renamed(cfg, NEW, OLD, TO_OLD)


def _sweep_spec(rewrite: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def spec_of(spec: Any) -> Any:
        if not isinstance(spec, dict):
            return spec
        out = {**spec, "base": rewrite(spec.get("base"))} if "base" in spec else dict(spec)
        if isinstance(spec.get("overrides"), list):
            out["overrides"] = [rewrite(o) for o in spec["overrides"]]
        return out
    return spec_of


def _rewrite(bind, table: str, column: str, rewrite: Callable[[Any], Any]) -> None:
    t = sa.table(table, sa.column("id", sa.Integer), sa.column(column, sa.JSON))
    for row_id, value in bind.execute(sa.select(t.c.id, t.c[column])).all():
        old = json.loads(value) if isinstance(value, str) else value
        new = rewrite(old)
        if new != old:
            bind.execute(sa.update(t).where(t.c.id == row_id).values({column: new}))


def upgrade() -> None:
    bind = op.get_bind()
    _rewrite(bind, "runs", "config", to_sampler)
    _rewrite(bind, "sweeps", "spec", _sweep_spec(to_sampler))


def downgrade() -> None:
    bind = op.get_bind()
    _rewrite(bind, "runs", "config", to_rollout_engine)
    _rewrite(bind, "sweeps", "spec", _sweep_spec(to_rollout_engine))
