"""`aero restore` onto a new machine, on both stores: a SQLite data directory that does not exist
yet, a new and empty PostgreSQL database. A snapshot taken by `aero backup` while a worker keeps
writing steps through the store's own functions restores there, and the API then answers the
same runs, steps, evaluations and tokens (API tokens still verify, a revoked one still does not)
as the source. A file that is not a whole snapshot (a text file, a truncated snapshot, one from a
newer schema) is refused in a line or two, with no traceback, and the target is left as it was:
no data directory created, the empty database still empty, a store that holds runs unchanged
even with --yes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import inspect, text
from typer.testing import CliRunner

from backend.db.metrics import upsert_eval_results, upsert_step_metrics
from backend.db.migrate import migrate
from backend.db.runs import create_run
from backend.db.session import get_engine, session_scope
from backend.db.tokens import create_token, revoke_token
from backend.main import create_app
from backend.settings import Settings
from cli.main import app as cli
from tests.backend.conftest import KINDS, EnqueueRecorder, _require
from tests.backend.test_backup import CONFIG, dump
from tests.stores import temp_database

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def fill(url: str) -> tuple[dict[str, str], int]:
    """Tokens of three roles (and a revoked one), two finished-looking runs with steps and an
    evaluation, and a live run a worker will keep writing; returns {name: token} and the live run."""
    tokens = {}
    with session_scope(url) as s:
        for name, role, user in (("root", "admin", None), ("alice", "member", None), ("bob-ro", "viewer", "bob"),
                                 ("old", "member", "alice")):
            tokens[name] = create_token(s, name, role=role, user=user)[1]
        revoke_token(s, "old")
        a = create_run(s, CONFIG, queue="cpu", name="a", tags=["x"], owner="alice")
        b = create_run(s, CONFIG, queue="gpu", name="b", owner="bob")
        live = create_run(s, CONFIG, queue="cpu", name="live", owner="alice")
        s.flush()
        upsert_step_metrics(s, a.id, {i: {"loss/total": 1.0 / i, "time/step_s": 0.1} for i in range(1, 6)})
        upsert_step_metrics(s, b.id, {1: {"loss/total": 0.5}})
        upsert_step_metrics(s, live.id, {i: {"loss/total": 2.0 / i} for i in range(1, 6)})
        upsert_eval_results(s, a.id, 5, {"overall": {"avg_at_k": 0.25, "pass_at_k": 0.5, "n": 8,
                                                     "per_problem": [[8, 2], [8, 0]]}})
        return tokens, live.id


@contextmanager
def new_machine(kind: str, tmp_path: Path) -> Iterator[tuple[str, dict[str, str | None]]]:
    """The store URL of a machine that has never run AERO Lab, and the environment `aero` finds
    there: SQLite, a data directory that does not exist; PostgreSQL, a new empty database."""
    if kind == "sqlite":
        data = tmp_path / "new-machine" / "aero-data"
        url = f"sqlite:///{data / 'aero.sqlite'}"
        try:
            yield url, {"AERO_DATA_DIR": str(data), "DATABASE_URL": None}
        finally:
            if data.exists():  # get_engine would make it
                get_engine(url).dispose()
        return
    with temp_database("postgresql", tmp_path) as url:
        yield url, {"DATABASE_URL": url, "AERO_DATA_DIR": str(tmp_path / "new-machine" / "aero-data")}


def api(url: str, tmp_path: Path) -> TestClient:
    settings = Settings(database_url=url, data_dir=tmp_path / "api-data", migrate_on_start=False)
    return TestClient(create_app(settings, enqueue=EnqueueRecorder()))


def untouched(kind: str, url: str) -> bool:
    """A new machine's store as it was before: no data directory; an empty database."""
    if kind == "sqlite":
        return not Path(url.removeprefix("sqlite:///")).parent.exists()
    return inspect(get_engine(url)).get_table_names() == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_backup_under_writes_restores_on_a_new_machine_and_the_api_answers_the_same(kind, tmp_path):
    _require(kind)
    with temp_database(kind, tmp_path) as src, new_machine(kind, tmp_path) as (dst, env):
        migrate(src)
        tokens, live = fill(src)
        stop, written = threading.Event(), []

        def worker() -> None:  # a worker logging steps, one transaction each, through the store's functions
            step = 6
            while not stop.is_set() and step < 5000:
                with session_scope(src) as s:
                    upsert_step_metrics(s, live, {step: {"loss/total": 2.0 / step, "reward/mean": step % 7}})
                written.append(step)
                step += 1

        t = threading.Thread(target=worker)
        t.start()
        try:
            while len(written) < 20 and t.is_alive():
                stop.wait(0.01)
            before = len(written)
            res = runner.invoke(cli, ["backup", str(tmp_path / "snap.bak"), "--database-url", src])
            during = len(written)
        finally:
            stop.set()
            t.join()
        assert res.exit_code == 0 and f"backed up the {kind} store" in res.output, res.output
        assert before >= 20  # the worker was writing when the backup began

        res = runner.invoke(cli, ["restore", str(tmp_path / "snap.bak")], env=env)  # no --database-url, no --yes
        assert res.exit_code == 0 and f"restored the {kind} store" in res.output, res.output
        if kind == "sqlite":
            data = Path(env["AERO_DATA_DIR"])
            assert (data / "aero.sqlite").is_file()
            assert oct(data.stat().st_mode & 0o777) == "0o700" and oct((data / "aero.sqlite").stat().st_mode & 0o777) == "0o600"

        with api(src, tmp_path) as old, api(dst, tmp_path) as new:
            admin = {"Authorization": f"Bearer {tokens['root']}"}
            runs = old.get("/api/runs?limit=100").json()
            assert runs["count"] == 3 and new.get("/api/runs?limit=100").json() == runs
            for run in runs["data"]:
                rid = run["id"]
                assert new.get(f"/api/runs/{rid}").json() == old.get(f"/api/runs/{rid}").json() == run
                assert new.get(f"/api/runs/{rid}/evals").json() == old.get(f"/api/runs/{rid}/evals").json()
                got, want = (c.get(f"/api/runs/{rid}/metrics?max_points=100000").json() for c in (new, old))
                if rid != live:
                    assert got == want and got["steps"]
                    continue
                # the live run: the snapshot holds a prefix of its steps, at least those written before
                # the backup began, each with the source's values
                n = len(got["steps"])
                assert got["steps"] == list(range(1, n + 1)) and 5 + before <= n <= 5 + during + 1
                assert got["series"] == {k: v[:n] for k, v in want["series"].items() if any(x is not None for x in v[:n])}
                assert got["last_step"] == n and got["run_status"] == want["run_status"]

            for name, tok in tokens.items():  # every token verifies as the same user and role; the revoked one does not
                h = {"Authorization": f"Bearer {tok}"}
                mine, theirs = new.get("/api/me", headers=h), old.get("/api/me", headers=h)
                assert mine.status_code == theirs.status_code == (401 if name == "old" else 200)
                assert mine.json() == theirs.json()
            strip = lambda body: [{k: v for k, v in t.items() if k != "last_used_at"} for t in body["data"]]  # noqa: E731
            listed = old.get("/api/tokens", headers=admin).json()
            assert len(listed["data"]) == 4 and strip(new.get("/api/tokens", headers=admin).json()) == strip(listed)
            # the restored store takes writes: a member submits through the API
            sub = new.post("/api/runs", json={"config": {"method": "grpo", "steps": 3}},
                           headers={"Authorization": f"Bearer {tokens['alice']}"})
            assert sub.status_code == 201, sub.text


def test_aero_restore_in_an_empty_directory(tmp_path):
    """The issue's own steps: on a new machine, in an empty directory, `aero restore snap.sqlite`
    (no AERO_DATA_DIR, no DATABASE_URL) makes ./aero-data and the store in it; a text file given
    instead is refused in one line and nothing is made."""
    with temp_database("sqlite", tmp_path) as src:
        migrate(src)
        fill(src)
        res = runner.invoke(cli, ["backup", str(tmp_path / "snap.sqlite"), "--database-url", src])
        assert res.exit_code == 0, res.output
        want = dump(src)
    (tmp_path / "notes.txt").write_text("not a snapshot\n")
    env = {k: v for k, v in os.environ.items() if k not in ("AERO_DATA_DIR", "DATABASE_URL")}
    env["PYTHONPATH"] = str(REPO)

    def aero(cwd: Path, *args: str) -> subprocess.CompletedProcess:
        cwd.mkdir()
        return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=120)

    refused = aero(tmp_path / "m1", "restore", str(tmp_path / "notes.txt"))
    out = refused.stdout + refused.stderr
    assert refused.returncode == 1 and "Traceback" not in out and len(out.strip().splitlines()) == 1, out
    assert "not an AERO Lab backup" in out and list((tmp_path / "m1").iterdir()) == []

    done = aero(tmp_path / "m2", "restore", str(tmp_path / "snap.sqlite"))
    assert done.returncode == 0 and "restored the sqlite store" in done.stdout, done.stdout + done.stderr
    url = f"sqlite:///{tmp_path / 'm2' / 'aero-data' / 'aero.sqlite'}"
    try:
        assert dump(url) == want
    finally:
        get_engine(url).dispose()


@pytest.fixture(scope="module", params=KINDS)
def snapshots(request, tmp_path_factory) -> Iterator[tuple[str, str, dict[str, Path]]]:
    """A store that holds runs, and files that are not snapshots of a store this code can take:
    a text file, an empty file, a snapshot missing its last 64 bytes, a snapshot from a newer
    schema (an Alembic revision this code does not know), a backup of another application's
    database of the same kind."""
    kind = request.param
    _require(kind)
    tmp = tmp_path_factory.mktemp(f"refused-{kind}")
    with temp_database(kind, tmp) as src:
        migrate(src)
        fill(src)
        files = {"text": tmp / "notes.txt", "empty": tmp / "empty.bak"}
        files["text"].write_text("store: aero-data/aero.sqlite\nbacked up: yesterday\n")
        files["empty"].write_bytes(b"")
        good = tmp / "good.bak"
        res = runner.invoke(cli, ["backup", str(good), "--database-url", src])
        assert res.exit_code == 0, res.output
        files["truncated"] = tmp / "truncated.bak"
        files["truncated"].write_bytes(good.read_bytes()[:-64])
        with session_scope(src) as s:  # what a later release's migration would leave
            head = s.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
            s.execute(text("UPDATE alembic_version SET version_num = '0999_from_the_future'"))
        files["newer"] = tmp / "newer.bak"
        res = runner.invoke(cli, ["backup", str(files["newer"]), "--database-url", src])
        assert res.exit_code == 0, res.output
        with session_scope(src) as s:
            s.execute(text("UPDATE alembic_version SET version_num = :h"), {"h": head})
        with temp_database(kind, tmp) as other:  # a store of the right kind, but someone else's
            with get_engine(other).begin() as conn:
                conn.execute(text("CREATE TABLE notes (id integer PRIMARY KEY, body text)"))
            files["foreign"] = tmp / "foreign.bak"
            assert runner.invoke(cli, ["backup", str(files["foreign"]), "--database-url", other]).exit_code == 0
        yield kind, src, files


REASONS = {"text": "not an AERO Lab backup", "empty": "not an AERO Lab backup", "foreign": "not an AERO Lab backup",
           "truncated": "truncated",
           "newer": "from a newer AERO Lab (schema revision 0999_from_the_future"}


def refused(res, case: str) -> None:
    out = res.output
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), (out, res.exception)
    assert "Traceback" not in out and 1 <= len(out.strip().splitlines()) <= 2, out
    assert "nothing changed" in out and REASONS[case] in out, out


@pytest.mark.parametrize("case", list(REASONS))
def test_what_is_not_a_snapshot_is_refused_and_changes_nothing(snapshots, case, tmp_path):
    kind, src, files = snapshots
    with new_machine(kind, tmp_path) as (dst, env):  # onto a new machine: nothing is created
        refused(runner.invoke(cli, ["restore", str(files[case]), "--yes"], env=env), case)
        assert untouched(kind, dst)
    before = dump(src)  # over a store that holds runs, even with --yes: every row stays
    refused(runner.invoke(cli, ["restore", str(files[case]), "--database-url", src, "--yes"]), case)
    assert dump(src) == before


def test_a_missing_postgresql_database_is_named(tmp_path):
    _require("postgresql")
    with temp_database("sqlite", tmp_path) as lite:
        migrate(lite)
        assert runner.invoke(cli, ["backup", str(tmp_path / "s.bak"), "--database-url", lite]).exit_code == 0
    with temp_database("postgresql", tmp_path) as pg:
        migrate(pg)
        assert runner.invoke(cli, ["backup", str(tmp_path / "p.bak"), "--database-url", pg]).exit_code == 0
        gone = pg.rsplit("/", 1)[0] + "/aero_test_no_such_database"
    res = runner.invoke(cli, ["restore", str(tmp_path / "p.bak"), "--database-url", gone])
    assert res.exit_code == 1 and "Traceback" not in res.output and "createdb" in res.output, res.output
    res = runner.invoke(cli, ["restore", str(tmp_path / "s.bak"), "--database-url", gone])  # the kind is checked first
    assert res.exit_code == 1 and "sqlite backup and DATABASE_URL is a postgresql store" in res.output, res.output
