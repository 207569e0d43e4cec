"""`aero rollouts RUN --step N` against the real API app (in process, over a temp SQLite store):
the step's table and texts, the filters, and hostile model text printed without reaching the
terminal raw (no escape sequence, no Rich markup applied)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from cli.main import app  # first: cli.main registers the command modules
import cli.rollout_cmds as rc  # noqa: I001
from backend.db.migrate import migrate
from backend.db.rollouts import upsert_step_details
from backend.db.runs import create_run
from backend.db.session import session_scope
from backend.main import create_app
from backend.settings import Settings
from trainer.spec.config import RunConfig

HOSTILE = "\x1b[2J\x1b[31m[bold]pwned[/bold] \u202eevil\nsecond line"


def row(i: int, stage: str, reward: float, response: str) -> dict:
    return {"group": i // 2, "row": i, "prompt": "2+2=", "response": response, "reward": reward, "correct": reward > 0.5,
            "advantage": None if stage == "curated out" else reward - 0.5, "stratum": "rescue", "round": int(stage != "explore"),
            "stage": stage, "length": 3, "truncated": False, "clipped": False}


@pytest.fixture
def api(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'aero.sqlite'}"
    migrate(url)
    with session_scope(url) as s:
        rid = create_run(s, RunConfig(steps=4).model_dump(mode="json"), queue="cpu").id
        upsert_step_details(s, rid, {2: {"rollouts": [row(0, "explore", 0.0, "5"), row(1, "curated out", 0.0, HOSTILE),
                                                      row(2, "rescue 1", 1.0, "4")], "histograms": {}},
                                     3: {"rollouts": [row(0, "explore", 1.0, "4")], "histograms": {}}})
    client = TestClient(create_app(Settings(database_url=url, data_dir=tmp_path / "data", migrate_on_start=False)),
                        base_url="http://testserver/api")
    monkeypatch.setattr(rc, "client", lambda api, token, timeout=30.0: client)
    return rid


def test_rollouts_of_a_step_with_filters_and_safe_text(api):
    runner = CliRunner()
    res = runner.invoke(app, ["rollouts", str(api), "--step", "2"], env={"COLUMNS": "160"})
    assert res.exit_code == 0, res.output
    assert "step 2: 3 matching rollout(s)" in res.output and "rescue 1" in res.output and "curated out" in res.output
    assert "\x1b" not in res.output and "\u202e" not in res.output  # escapes shown, never sent to the terminal
    assert "\\x1b[2J" in res.output and "[bold]pwned[/bold]" in res.output and "second line" in res.output
    res = runner.invoke(app, ["rollouts", str(api), "--step", "2", "--stage", "rescue", "--no-text"], env={"COLUMNS": "160"})
    assert "1 matching rollout(s)" in res.output and "rescue 1" in res.output
    assert "- reward" not in res.output and "2+2=" not in res.output  # the table only, no text panels
    res = runner.invoke(app, ["rollouts", str(api)], env={"COLUMNS": "160"})  # default: the last step with a sample
    assert "step 3: 1 matching" in res.output


def test_unknown_step_and_bad_filter_exit_with_the_apis_answer(api):
    runner = CliRunner()
    res = runner.invoke(app, ["rollouts", str(api), "--step", "9"])
    assert res.exit_code == 1 and "404" in res.output
    res = runner.invoke(app, ["rollouts", str(api), "--stratum", "middle"])
    assert res.exit_code == 1 and "422" in res.output and "stratum" in res.output
