"""Stored run configs and sweeps name the generation settings in one ``rollout`` block.

``sampler``, ``rollout_decode`` and ``sampler_rng`` (top-level fields) and ``aero.schedule``
(AERO's section) are ``rollout.sampler``, ``rollout.decode``, ``rollout.rng`` and
``rollout.schedule`` now. RunConfig still reads the old names with a deprecation warning; this
migration rewrites every stored run config and sweep (its base and its overrides, nested or
dotted, each in the form it was given) so stored configs say what every new one says. A run
config stored whole (it has ``optim``) gets the whole block, the defaults filling what it did not
name (a GRPO run had no ``aero.schedule``: ``calls``), so a seed group (keyed by the seed-less
stored config) holds an older run and a new one of the same config together. A value already in
the block is kept. Downgrade writes the old fields back (an older revision refuses the block).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07

"""
import json
from typing import Any, Callable, Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = '0017'
down_revision: Union[str, Sequence[str], None] = '0016'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BLOCK = "rollout"
# old place -> the block's key
TOP = {"sampler": "sampler", "rollout_decode": "decode", "sampler_rng": "rng"}
AERO, SCHEDULE = "aero", "schedule"
DEFAULTS = {"sampler": "hf", "decode": "dynamic", "rng": "stream", "schedule": "calls"}
# a run config stored whole (RunConfig.model_dump) has every field; a partial one (an older run,
# a sweep's base or override) rarely has these together
WHOLE = ("optim", "offpolicy", "seed", "steps", "batch_prompts", "n_total", "max_new_tokens", "eval_every")


def to_block(cfg: Any, stored_run: bool = False) -> Any:
    """``cfg`` (a run config, a sweep base or override) with the old fields in the block; a
    stored run's config that has every field (``WHOLE``) gets the whole block."""
    if not isinstance(cfg, dict):
        return cfg
    out, nested, dotted = dict(cfg), {}, {}
    for old, key in TOP.items():
        if old in out:
            nested[key] = out.pop(old)
    if isinstance(out.get(AERO), dict) and SCHEDULE in out[AERO]:
        out[AERO] = {k: v for k, v in out[AERO].items() if k != SCHEDULE}
        nested[SCHEDULE] = cfg[AERO][SCHEDULE]
        if not out[AERO]:  # a section that held only the schedule
            del out[AERO]
    if f"{AERO}.{SCHEDULE}" in out:
        dotted[f"{BLOCK}.{SCHEDULE}"] = out.pop(f"{AERO}.{SCHEDULE}")
    whole = stored_run and all(k in out for k in WHOLE)
    if not nested and not dotted and not (whole and BLOCK not in out):
        return cfg
    if nested or whole:
        block = out.get(BLOCK) if isinstance(out.get(BLOCK), dict) else {}
        out[BLOCK] = {**(DEFAULTS if whole else {}), **nested, **block}
    for key, value in dotted.items():
        out.setdefault(key, value)
    return out


def from_block(cfg: Any) -> Any:
    """``cfg`` with the block's fields back in their old places."""
    if not isinstance(cfg, dict):
        return cfg
    out = dict(cfg)
    block = out.pop(BLOCK, None)
    if isinstance(block, dict):
        for old, key in TOP.items():
            if key in block:
                out.setdefault(old, block[key])
        if SCHEDULE in block and isinstance(out.get(AERO), dict):
            out[AERO] = {**out[AERO], SCHEDULE: block[SCHEDULE]}
        elif SCHEDULE in block and not all(k in out for k in WHOLE):  # a partial config's own schedule
            out[AERO] = {SCHEDULE: block[SCHEDULE]}
    for old, key in TOP.items():
        if f"{BLOCK}.{key}" in out:
            out.setdefault(old, out.pop(f"{BLOCK}.{key}"))
    if f"{BLOCK}.{SCHEDULE}" in out:
        out.setdefault(f"{AERO}.{SCHEDULE}", out.pop(f"{BLOCK}.{SCHEDULE}"))
    return out


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
    _rewrite(bind, "runs", "config", lambda cfg: to_block(cfg, stored_run=True))
    _rewrite(bind, "sweeps", "spec", _sweep_spec(to_block))


def downgrade() -> None:
    bind = op.get_bind()
    _rewrite(bind, "runs", "config", from_block)
    _rewrite(bind, "sweeps", "spec", _sweep_spec(from_block))
