"""Fixtures for the platform tests: the same tests run on SQLite and on PostgreSQL.

``db_url`` is session-scoped and parametrized ("sqlite", "postgresql"): one throwaway
database per kind per test session, migrated once, dropped at the end. ``db`` empties it after
each test. Set AERO_TEST_SKIP_PG=1 to run on SQLite only (otherwise a missing PostgreSQL fails).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from backend.db.migrate import migrate
from backend.db.session import get_engine, make_sessionmaker
from tests.stores import postgres_available, temp_database, truncate_all
from backend.db.tokens import create_token
from backend.main import create_app
from backend.settings import Settings

KINDS = ["sqlite", "postgresql"]


def _require(kind: str) -> None:
    if kind == "postgresql" and not postgres_available():
        if os.environ.get("AERO_TEST_SKIP_PG"):
            pytest.skip("PostgreSQL not reachable and AERO_TEST_SKIP_PG set")
        pytest.fail("PostgreSQL at 127.0.0.1:5432 is not reachable (start it, or set AERO_TEST_SKIP_PG=1)")


@pytest.fixture(scope="session", params=KINDS)
def db_url(request, tmp_path_factory) -> Iterator[str]:
    _require(request.param)
    with temp_database(request.param, tmp_path_factory.mktemp("db")) as url:
        migrate(url)
        yield url


@pytest.fixture
def db(db_url) -> Iterator[str]:
    yield db_url
    truncate_all(db_url)


@pytest.fixture
def session(db):
    with make_sessionmaker(get_engine(db))() as s:
        yield s


class EnqueueRecorder:
    """Stands in for the broker in API tests (the real broker is tested in test_queue.py)."""

    def __init__(self):
        self.sent: list[tuple[int, str]] = []
        self.fail: Exception | None = None

    def __call__(self, run_id: int, queue: str) -> None:
        if self.fail is not None:
            raise self.fail
        self.sent.append((run_id, queue))


@pytest.fixture
def enqueued() -> EnqueueRecorder:
    return EnqueueRecorder()


@pytest.fixture
def make_settings(db, tmp_path):
    def make(**kw) -> Settings:
        return Settings(database_url=db, data_dir=tmp_path / "data", migrate_on_start=False, **kw)
    return make


@pytest.fixture
def app(make_settings, enqueued):
    return create_app(make_settings(), enqueue=enqueued)


@pytest.fixture
def client(app) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


@pytest.fixture
def token(session) -> str:
    _, tok = create_token(session, "test")
    session.commit()
    return tok


@pytest.fixture
def auth(token) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(params=KINDS)
def empty_db_url(request, tmp_path) -> Iterator[str]:
    """A brand-new database with no tables (function scope)."""
    _require(request.param)
    with temp_database(request.param, tmp_path) as url:
        yield url
