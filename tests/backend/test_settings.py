"""Settings from the environment, and `aero token create`'s plain function."""

import pytest

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
    token, role = create_token("ci", s)
    assert token.startswith("aero_") and len(token) >= 40 and role == "admin"  # the store's first token
    with make_sessionmaker(get_engine(s.database_url))() as session:
        (row,) = list_tokens(session)
        assert (row.name, row.token_hash) == ("ci", hash_token(token))
        assert verify_token(session, token).id == row.id
        assert verify_token(session, token + "x") is None and verify_token(session, "") is None
    assert create_token("ci", s)[0] != token  # a new secret each time


@pytest.fixture
def world_traversable():
    """A fresh directory under the system temp dir that other users can traverse (pytest's
    tmp_path sits under a 0700 directory, which would hide the files' own modes)."""
    import shutil
    import tempfile
    from pathlib import Path

    d = Path(tempfile.mkdtemp(prefix="aero-perm-test-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _walk_modes(root):
    import stat

    return {p: stat.S_IMODE(p.lstat().st_mode) for p in [root, *root.rglob("*")]}


def test_the_data_dir_and_its_files_are_private(world_traversable):
    """Store (with its WAL), broker and migration lock: nothing under the data directory is
    readable by group or others, even when the process's umask would allow it, and the sandbox
    user (uid 65534) cannot open the store."""
    import os
    import subprocess

    from backend.queue import enqueue_run
    from backend.settings import broker_url

    old = os.umask(0o022)  # a permissive umask (tests do not go through get_settings)
    try:
        s = Settings(data_dir=world_traversable / "data")
        create_token("ci", s)  # migrates: aero.sqlite, its -wal/-shm, aero.migrate.lock
        enqueue_run(s, 7, "cpu")  # the embedded broker: broker.sqlite
        with make_sessionmaker(get_engine(s.database_url))() as session:
            assert list_tokens(session)  # the store is open (WAL present)
            modes = _walk_modes(s.data_path)
    finally:
        os.umask(old)
    names = {p.name for p in modes}
    assert {"aero.sqlite", "aero.sqlite-wal", "broker.sqlite"} <= names, names
    assert modes[s.data_path] == 0o700
    assert not {p: oct(m) for p, m in modes.items() if m & 0o077}, "readable by group/others"
    assert broker_url(s)
    if os.geteuid() != 0:
        pytest.skip("opening the store as another uid needs root")

    def as_nobody():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)

    files = (s.data_path / "aero.sqlite", s.data_path / "aero.sqlite-wal", s.data_path / "broker.sqlite")
    for f in files:
        r = subprocess.run(["/bin/cat", str(f)], preexec_fn=as_nobody, capture_output=True)
        assert r.returncode != 0 and b"Permission denied" in r.stderr, (f, r)
    s.data_path.chmod(0o711)  # the files' own 0600 holds even where the directory is traversable
    for f in files:
        r = subprocess.run(["/bin/cat", str(f)], preexec_fn=as_nobody, capture_output=True)
        assert r.returncode != 0 and b"Permission denied" in r.stderr, (f, r)
    control = s.data_path / "control"
    control.write_text("x")
    control.chmod(0o644)  # what the store was before: the probe does read such a file
    assert subprocess.run(["/bin/cat", str(control)], preexec_fn=as_nobody, capture_output=True).stdout == b"x"


def test_an_existing_data_dir_is_made_private(tmp_path):
    """A data directory from before (0755, store and token 0644) is tightened on first use."""
    import os

    from backend.settings import ensure_data_dir, private_umask

    d = tmp_path / "data"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    for name in ("aero.sqlite", "aero.sqlite-wal", "broker.sqlite", "admin.token", "notes.txt"):
        (d / name).write_text("x")
        (d / name).chmod(0o644)
    ensure_data_dir(Settings(data_dir=d))
    modes = _walk_modes(d)
    assert modes[d] == 0o700
    assert {p.name: oct(m) for p, m in modes.items() if m & 0o077} == {"notes.txt": "0o644"}  # only its own files
    old = os.umask(0o022)
    try:
        private_umask()
        assert os.umask(0o022) == 0o077  # the platform processes' umask (get_settings sets it)
    finally:
        os.umask(old)


def test_api_threads_bound_the_thread_pool_that_runs_blocking_routes(tmp_path, monkeypatch):
    """AERO_API_THREADS sets anyio's default thread limiter when the app starts (anyio's own
    default is 40); zero is refused, naming the field."""
    import anyio.to_thread
    from fastapi.testclient import TestClient
    from pydantic import ValidationError

    from backend.main import create_app

    monkeypatch.setenv("AERO_API_THREADS", "3")
    settings = Settings(data_dir=tmp_path / "data")
    assert settings.api_threads == 3
    with TestClient(create_app(settings)) as c:
        assert c.portal.call(lambda: anyio.to_thread.current_default_thread_limiter().total_tokens) == 3
        assert c.get("/api/health").status_code == 200
    monkeypatch.setenv("AERO_API_THREADS", "0")
    with pytest.raises(ValidationError, match="AERO_API_THREADS"):
        Settings(data_dir=tmp_path / "data")
