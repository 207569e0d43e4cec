"""Users, roles, ownership and the audit log.

- ``users``: one row per user (unique name).
- ``api_tokens.user_id`` and ``api_tokens.role`` (admin | member | viewer). Every token that
  exists before this revision was all-powerful, so it keeps that power: it becomes an ``admin``
  token of a user named after the token (tokens sharing a name share the user).
- ``runs.owner`` / ``sweeps.owner``: the submitting user's name. Runs and sweeps stored before
  this revision have no recorded submitter and stay ``NULL`` (only an admin may change them).
- ``runs.ticket``: the task message whose worker claimed the run (the workers' fair share).
- ``audit_log``: every state change with its user, time and before/after.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision: str = '0006'
down_revision: Union[str, Sequence[str], None] = '0005'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

ID = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')


def upgrade() -> None:
    op.create_table('users',
    sa.Column('id', ID, autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_users')),
    sa.UniqueConstraint('name', name=op.f('uq_users_name'))
    )
    op.create_table('audit_log',
    sa.Column('id', ID, autoincrement=True, nullable=False),
    sa.Column('at', sa.DateTime(), nullable=False),
    sa.Column('user', sa.String(length=200), nullable=True),
    sa.Column('role', sa.String(length=16), nullable=True),
    sa.Column('action', sa.String(length=64), nullable=False),
    sa.Column('target', sa.String(length=64), nullable=True),
    sa.Column('before', JSON, nullable=True),
    sa.Column('after', JSON, nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_log'))
    )
    with op.batch_alter_table('audit_log') as b:
        b.create_index(b.f('ix_audit_log_at'), ['at'], unique=False)
        b.create_index(b.f('ix_audit_log_user'), ['user'], unique=False)
        b.create_index(b.f('ix_audit_log_action'), ['action'], unique=False)
    with op.batch_alter_table('api_tokens') as b:
        b.add_column(sa.Column('user_id', ID, nullable=True))
        b.add_column(sa.Column('role', sa.String(length=16), server_default='admin', nullable=False))
        b.create_index(b.f('ix_api_tokens_user_id'), ['user_id'], unique=False)
        b.create_foreign_key(b.f('fk_api_tokens_user_id_users'), 'users', ['user_id'], ['id'], ondelete='CASCADE')
    with op.batch_alter_table('runs') as b:
        b.add_column(sa.Column('owner', sa.String(length=200), nullable=True))
        b.add_column(sa.Column('ticket', ID, nullable=True))
        b.create_index(b.f('ix_runs_owner'), ['owner'], unique=False)
        b.create_index(b.f('ix_runs_ticket'), ['ticket'], unique=False)
    with op.batch_alter_table('sweeps') as b:
        b.add_column(sa.Column('owner', sa.String(length=200), nullable=True))
        b.create_index(b.f('ix_sweeps_owner'), ['owner'], unique=False)
    _tokens_become_admin_users()


def _tokens_become_admin_users() -> None:
    """Each existing token: an admin token of the user named like it (created here)."""
    bind = op.get_bind()
    tokens = sa.table('api_tokens', sa.column('id', sa.Integer), sa.column('name', sa.String),
                      sa.column('user_id', sa.Integer), sa.column('role', sa.String))
    users = sa.table('users', sa.column('id', sa.Integer), sa.column('name', sa.String),
                     sa.column('created_at', sa.DateTime))
    names = sorted({name for (name,) in bind.execute(sa.select(tokens.c.name)).all()})
    for name in names:
        bind.execute(sa.insert(users).values(name=name, created_at=sa.func.now()))
        user_id = bind.execute(sa.select(users.c.id).where(users.c.name == name)).scalar_one()
        bind.execute(sa.update(tokens).where(tokens.c.name == name).values(user_id=user_id, role='admin'))


def _drop_columns(table: str, columns: Sequence[str]) -> None:
    """Drop plain columns (their indexes first) in place. Not batch mode: on SQLite that copies
    the table, and dropping the old ``runs`` / ``sweeps`` would fire the ON DELETE actions of the
    rows that point at them (metrics deleted, sweep ids cleared). SQLite >= 3.35 drops a column
    natively."""
    for column in columns:
        op.drop_index(op.f(f'ix_{table}_{column}'), table_name=table)
        if op.get_bind().dialect.name == 'sqlite':
            op.execute(f'ALTER TABLE {table} DROP COLUMN {column}')
        else:
            op.drop_column(table, column)


def downgrade() -> None:
    _drop_columns('sweeps', ['owner'])
    _drop_columns('runs', ['ticket', 'owner'])
    with op.batch_alter_table('api_tokens') as b:
        b.drop_constraint(b.f('fk_api_tokens_user_id_users'), type_='foreignkey')
        b.drop_index(b.f('ix_api_tokens_user_id'))
        b.drop_column('role')
        b.drop_column('user_id')
    op.drop_table('audit_log')
    op.drop_table('users')
