"""Fixtures for worker tests: a migrated store on SQLite (a temp file) and on PostgreSQL (a
private schema in the ``test`` database, so parallel suites never see each other's rows)."""

from __future__ import annotations

import os
import uuid

import psycopg
import pytest

from backend.db.migrate import migrate
from backend.db.runs import create_run
from backend.db.session import get_engine, session_scope
from trainer.config import RunConfig

PG_DSN = os.environ.get("AERO_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def tiny_config(**kw) -> dict:
    base = dict(method="aero", preset="tiny", steps=4, batch_prompts=4, eval_every=0, eval_problems=4,
                checkpoint_every=2, device="cpu")
    return RunConfig(**{**base, **kw}).model_dump(mode="json")


@pytest.fixture
def sqlite_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'aero.sqlite'}"
    migrate(url)
    yield url
    get_engine(url).dispose()


@pytest.fixture
def pg_url():
    schema = f"wk_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(PG_DSN, autocommit=True, connect_timeout=3) as c:
            c.execute(f'CREATE SCHEMA "{schema}"')
    except psycopg.OperationalError as e:  # pragma: no cover - CI starts PostgreSQL
        pytest.fail(f"PostgreSQL not reachable at {PG_DSN}: {e}")
    url = PG_DSN.replace("postgresql://", "postgresql+psycopg://", 1) + f"?options=-csearch_path%3D{schema}"
    migrate(url)
    yield url
    get_engine(url).dispose()
    with psycopg.connect(PG_DSN, autocommit=True) as c:
        c.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request):
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture
def make_run(db_url):
    """make_run(**config overrides) -> run id of a new queued run."""

    def make(**kw) -> int:
        with session_scope(db_url) as s:
            return create_run(s, tiny_config(**kw), queue="cpu").id

    return make
