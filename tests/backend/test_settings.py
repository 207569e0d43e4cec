"""Settings from the environment, and `aero token create`'s plain function."""

from backend.cli_token import create_token
from backend.db.session import get_engine, make_sessionmaker
from backend.db.tokens import hash_token, list_tokens, verify_token
from backend.settings import Settings


def test_defaults_are_embedded(monkeypatch, tmp_path):
    for var in ("AERO_DATA_DIR", "DATABASE_URL", "REDIS_URL", "AUTH_PROTECT_READS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    s = Settings()
    assert s.data_path == tmp_path.resolve() / "aero-data"
    assert s.database_url == f"sqlite:///{tmp_path.resolve()}/aero-data/aero.sqlite"
    assert s.redis_url is None and s.auth_protect_reads is False and s.max_body_bytes == 1 << 20
    assert s.runs_dir == s.data_path / "runs"


def test_environment_overrides(monkeypatch, tmp_path):
    monkeypatch.setenv("AERO_DATA_DIR", str(tmp_path / "d"))
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@h/db")
    monkeypatch.setenv("REDIS_URL", "redis://h:6379/0")
    monkeypatch.setenv("AUTH_PROTECT_READS", "true")
    monkeypatch.setenv("AERO_MAX_BODY_BYTES", "1234")
    s = Settings()
    assert (s.data_path, s.database_url, s.redis_url, s.auth_protect_reads, s.max_body_bytes) == (
        tmp_path / "d", "postgresql://u@h/db", "redis://h:6379/0", True, 1234)


def test_create_token_migrates_and_stores_only_the_hash(tmp_path):
    s = Settings(data_dir=tmp_path)
    token = create_token("ci", s)
    assert token.startswith("aero_") and len(token) >= 40
    with make_sessionmaker(get_engine(s.database_url))() as session:
        (row,) = list_tokens(session)
        assert (row.name, row.token_hash) == ("ci", hash_token(token))
        assert verify_token(session, token).id == row.id
        assert verify_token(session, token + "x") is None and verify_token(session, "") is None
    assert create_token("ci", s) != token  # a new secret each time
