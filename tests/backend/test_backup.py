"""`aero backup` / `aero restore` (backend/backup.py) on real SQLite files and real PostgreSQL
databases: a round trip gives back every row of every table; a backup taken while a writer
commits step after step is one consistent snapshot (a prefix of the steps, and the run's
metrics version agreeing with it); a restore refuses a store that holds runs without --yes,
and a backup of one store kind in the other."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from backend.backup import BackupError, backup, file_kind, restore
from backend.db.metrics import upsert_eval_results, upsert_step_metrics
from backend.db.migrate import migrate
from backend.db.models import Base, Run, StepMetric
from backend.db.runs import create_run
from backend.db.session import get_engine, session_scope
from backend.db.tokens import create_token
from cli.main import app
from tests.backend.conftest import _require
from tests.stores import temp_database
from trainer.spec.config import parse_run_config

CONFIG = parse_run_config({"method": "grpo", "steps": 50}).model_dump(mode="json")


def fill(url: str) -> int:
    """Two users' runs with metrics, an evaluation and tokens; returns the first run's id."""
    with session_scope(url) as s:
        create_token(s, "alice", role="member")
        create_token(s, "bob", role="viewer", user="bob")
        a = create_run(s, CONFIG, queue="cpu", name="a", tags=["x"], owner="alice")
        b = create_run(s, CONFIG, queue="gpu", name="b", owner="bob")
        s.flush()
        upsert_step_metrics(s, a.id, {i: {"loss/total": 1.0 / i, "time/step_s": 0.1} for i in range(1, 6)})
        upsert_step_metrics(s, b.id, {1: {"loss/total": 0.5}})
        upsert_eval_results(s, a.id, 5, {"overall": {"avg_at_k": 0.25, "pass_at_k": 0.5, "n": 8,
                                                     "per_problem": [[8, 2], [8, 0]]}})
        return a.id


def dump(url: str) -> dict[str, list[tuple]]:
    """Every row of every table, ordered by primary key."""
    out = {}
    with get_engine(url).connect() as conn:
        for table in Base.metadata.sorted_tables:
            rows = conn.execute(select(table).order_by(*table.primary_key.columns)).all()
            out[table.name] = [tuple(r) for r in rows]
    return out


@pytest.fixture(params=["sqlite", "postgresql"])
def two_stores(request, tmp_path):
    _require(request.param)
    with temp_database(request.param, tmp_path) as src, temp_database(request.param, tmp_path) as dst:
        migrate(src)
        yield request.param, src, dst


def test_round_trip_gives_back_every_row(two_stores, tmp_path):
    kind, src, dst = two_stores
    fill(src)
    before = dump(src)
    snap = backup(src, tmp_path / "store.bak")
    assert snap.kind == kind == file_kind(snap.path) and snap.bytes > 0
    assert not list(tmp_path.glob("*.partial"))
    restore(dst, snap.path)
    assert dump(dst) == before
    assert sum(len(rows) for rows in before.values()) > 10  # runs, users, tokens, steps, series, evals
    # restoring over a store that holds runs needs force; with it, the store is the snapshot again
    with session_scope(dst) as s:
        create_run(s, CONFIG, queue="cpu", name="after the backup")
    with pytest.raises(BackupError, match="--yes"):
        restore(dst, snap.path)
    restore(dst, snap.path, force=True)
    assert dump(dst) == before


def test_a_backup_under_writes_is_one_consistent_snapshot(two_stores, tmp_path):
    kind, src, dst = two_stores
    run_id = fill(src)
    stop, written = threading.Event(), []

    def writer() -> None:  # a worker logging steps, one transaction each
        step = 6
        while not stop.is_set() and step < 2000:
            with session_scope(src) as s:
                upsert_step_metrics(s, run_id, {step: {"loss/total": 1.0 / step}})
            written.append(step)
            step += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        while len(written) < 20:  # the writer is going
            stop.wait(0.01)
        backup(src, tmp_path / "live.bak")
        seen_during = len(written)
    finally:
        stop.set()
        t.join()
    restore(dst, tmp_path / "live.bak")
    with session_scope(dst) as s:
        steps = list(s.scalars(select(StepMetric.step).where(StepMetric.run_id == run_id).order_by(StepMetric.step)))
        version = s.scalar(select(Run.metrics_version).where(Run.id == run_id))
    assert steps == list(range(1, len(steps) + 1))  # a prefix: no step lost inside it, none torn
    assert len(steps) >= 5 + 20 and len(steps) <= 5 + seen_during + 1
    assert version == 2 + (len(steps) - 5)  # the run row and its steps are from the same moment


def test_kinds_do_not_cross_and_missing_files_are_named(tmp_path):
    _require("postgresql")
    with temp_database("sqlite", tmp_path) as lite, temp_database("postgresql", tmp_path) as pg:
        migrate(lite)
        snap = backup(lite, tmp_path / "lite.bak")
        with pytest.raises(BackupError, match="sqlite backup and DATABASE_URL is a postgresql store"):
            restore(pg, snap.path)
        with pytest.raises(BackupError, match="no such backup file"):
            restore(lite, tmp_path / "nothing.bak")
    (tmp_path / "junk.bak").write_bytes(b"hello")
    with pytest.raises(BackupError, match="not an AERO Lab backup"):
        file_kind(tmp_path / "junk.bak")


def test_the_cli_backs_up_and_restores(tmp_path):
    runner = CliRunner()
    with temp_database("sqlite", tmp_path) as src, temp_database("sqlite", tmp_path) as dst:
        migrate(src)
        fill(src)
        out = tmp_path / "cli.bak"
        res = runner.invoke(app, ["backup", str(out), "--database-url", src])
        assert res.exit_code == 0 and "backed up the sqlite store" in res.output, res.output
        migrate(dst)
        with session_scope(dst) as s:
            create_run(s, CONFIG, queue="cpu")
        refused = runner.invoke(app, ["restore", str(out), "--database-url", dst])
        assert refused.exit_code == 1 and "--yes" in refused.output
        res = runner.invoke(app, ["restore", str(out), "--database-url", dst, "--yes"])
        assert res.exit_code == 0, res.output
        assert dump(dst) == dump(src)
    assert Path(out).is_file()
