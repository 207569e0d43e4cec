"""`aero token create NAME --role ... [--user ...]`, `aero token list / revoke` and `aero audit`:
tokens with roles in the configured store (each change recorded in the audit log as the
operator's), and the audit log read through the API with an admin token (the API runs in
process: a Starlette TestClient is an httpx.Client)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from rich.console import Console
from sqlalchemy import select
from typer.testing import CliRunner

from backend.db.models import ApiToken, AuditEvent, User
from backend.db.session import get_engine, session_scope
from backend.main import create_app
from backend.settings import Settings
from cli import access_cmds
from cli.main import app

runner = CliRunner()


@pytest.fixture
def data_env(tmp_path, monkeypatch):
    from backend.settings import get_settings

    monkeypatch.setenv("AERO_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    get_settings.cache_clear()
    yield Settings(data_dir=tmp_path / "data")
    get_settings.cache_clear()
    get_engine.cache_clear()


def test_token_create_with_role_and_user(data_env):
    res = runner.invoke(app, ["token", "create", "alice-laptop", "--role", "member", "--user", "alice"])
    assert res.exit_code == 0, res.output
    token = res.stdout.strip().splitlines()[-1]
    assert token.startswith("aero_")
    with session_scope(data_env.database_url) as s:
        row = s.scalar(select(ApiToken).where(ApiToken.name == "alice-laptop"))
        assert row.role == "member" and s.get(User, row.user_id).name == "alice"
        (event,) = s.scalars(select(AuditEvent))
        assert (event.action, event.user, event.after) == ("token.create", None, {"name": "alice-laptop", "user": "alice",
                                                                                 "role": "member"})
    listed = runner.invoke(app, ["token", "list"], env={"COLUMNS": "200"})
    assert "alice-laptop" in listed.output and "member" in listed.output and "alice " in listed.output
    assert runner.invoke(app, ["token", "revoke", "alice-laptop"]).exit_code == 0
    with session_scope(data_env.database_url) as s:
        assert [e.action for e in s.scalars(select(AuditEvent).order_by(AuditEvent.id))] == ["token.create", "token.revoke"]


def test_token_create_defaults_to_admin_only_for_the_first_token(data_env):
    """Least privilege by default: the store's first token is an admin (someone must manage the
    others); after that a token without --role is a member, until no live admin is left."""
    def create(name, *role):
        res = runner.invoke(app, ["token", "create", name, *role])
        assert res.exit_code == 0, res.output
        return res

    assert "admin token" in create("root").output
    assert "member token" in create("bob").output
    assert "viewer token" in create("eve", "--role", "viewer").output
    assert "admin token" in create("carol", "--role", "admin").output
    assert runner.invoke(app, ["token", "revoke", "root"]).exit_code == 0
    assert "member token" in create("dan").output  # carol is still an admin
    assert runner.invoke(app, ["token", "revoke", "carol"]).exit_code == 0
    assert "admin token" in create("ops").output  # no live admin: the next token bootstraps again
    with session_scope(data_env.database_url) as s:
        roles = {t.name: t.role for t in s.scalars(select(ApiToken))}
    assert roles == {"root": "admin", "bob": "member", "eve": "viewer", "carol": "admin", "dan": "member", "ops": "admin"}


def test_token_create_refuses_an_unknown_role(data_env):
    res = runner.invoke(app, ["token", "create", "x", "--role", "owner"])
    assert res.exit_code == 2 and "--role must be one of admin, member, viewer" in res.output


def test_aero_audit_reads_the_log_with_an_admin_token(data_env, monkeypatch):
    tokens = {}
    for name, role in (("root", "admin"), ("alice", "member")):
        tokens[name] = runner.invoke(app, ["token", "create", name, "--role", role]).stdout.strip().splitlines()[-1]
    api = create_app(data_env, enqueue=lambda run_id, queue: None)

    def client(_api, token, timeout=30.0):
        return TestClient(api, base_url="http://testserver/api", headers={"Authorization": f"Bearer {token}"})

    monkeypatch.setattr(access_cmds, "client", client)
    with client(None, tokens["alice"]) as c:
        assert c.post("/runs", json={"config": {"method": "grpo", "steps": 2}}).status_code == 201
    res = runner.invoke(app, ["audit", "--token", tokens["root"], "--json"])
    assert res.exit_code == 0, res.output
    events = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(e["action"], e["user"]) for e in events] == [("run.create", "alice"), ("token.create", None), ("token.create", None)]
    res = runner.invoke(app, ["audit", "--token", tokens["root"], "--user", "alice"], env={"COLUMNS": "250"})
    assert res.exit_code == 0 and "run.create" in res.output and "token.create" not in res.output
    res = runner.invoke(app, ["audit", "--token", tokens["alice"]])
    assert res.exit_code == 1 and "403" in res.output and "admin" in res.output


def test_aero_runs_mine_lists_only_the_tokens_users_runs(data_env, monkeypatch):
    from cli import submit_cmds

    tokens = {name: runner.invoke(app, ["token", "create", name, "--role", "member"]).stdout.strip().splitlines()[-1]
              for name in ("alice", "bob")}
    api = create_app(data_env, enqueue=lambda run_id, queue: None)

    def client(_api, token, timeout=30.0):
        return TestClient(api, base_url="http://testserver/api", headers={"Authorization": f"Bearer {token}"})

    monkeypatch.setattr(submit_cmds, "client", client)
    # the module's consoles were made at import, under whatever terminal that was: pin a width
    # wide enough for the run names (as tests/cli/test_cli_escaping.py does)
    monkeypatch.setattr(submit_cmds, "out", Console(color_system=None, width=250))
    for name in ("alice", "bob"):
        with client(None, tokens[name]) as c:
            assert c.post("/runs", json={"config": {"method": "grpo", "steps": 2}, "name": f"{name}-run"}).status_code == 201
    res = runner.invoke(app, ["runs", "--mine", "--token", tokens["bob"]], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "bob-run" in res.output and "alice-run" not in res.output and "1 of 1 run(s)" in res.output
    res = runner.invoke(app, ["runs", "--owner", "alice", "--token", tokens["bob"]], env={"COLUMNS": "250"})
    assert "alice-run" in res.output and "bob-run" not in res.output
