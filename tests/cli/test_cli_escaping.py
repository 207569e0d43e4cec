"""User text (run and sweep names, tags, error messages) printed through Rich: markup in a name
must print as itself, not crash `aero runs` for every user, and control characters must not
reach the terminal raw."""

from __future__ import annotations

import io

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

from cli.main import app  # first: cli.main registers the command modules
import cli.rest_client as rest  # noqa: I001
import cli.submit_cmds as sc
from cli.common import safe

NAMES = ["[/oops]", "[bold]x", "\x1b[31mred", "x\\", "[link=http://evil]y[/link]", "a\u202eb", "c\x9bd"]


def _run(name: str, tags: list[str] | None = None) -> dict:
    return {"id": 7, "name": name, "method": "aero", "status": "failed", "progress": 0.5, "current_step": 1,
            "total_steps": 2, "queue": "cpu", "sweep_id": None, "tags": tags or [name]}


def _render(renderable) -> str:
    con = Console(file=io.StringIO(), width=200, color_system=None)
    con.print(renderable)
    return con.file.getvalue()


@pytest.mark.parametrize("name", NAMES)
def test_runs_table_prints_names_literally(name):
    text = _render(rest.runs_table([_run(name)], title=f"sweep 1 ({safe(name)})"))
    assert "\x1b" not in text and "\x9b" not in text and "\u202e" not in text
    if name.isprintable():
        assert name in text  # markup shows as typed


def test_safe_escapes_markup_and_controls():
    assert safe("[/oops]") == "\\[/oops]"
    assert safe("\x1b[31mred") == "\\x1b[31mred"
    assert safe(None) == ""
    for n in NAMES:
        _render(safe(n))  # never a MarkupError


class _Api:
    """A stand-in API answering GET /runs and a 422 whose message holds markup."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"data": [_run(n) for n in NAMES], "count": len(NAMES)})
        return httpx.Response(422, json={"detail": [{"loc": ["body", "[/x]"], "msg": "bad [/oops] \x1b[2J"}]})


@pytest.fixture
def fake_api(monkeypatch):
    def client(api, token, timeout=30.0):
        return httpx.Client(base_url="http://api/api", transport=httpx.MockTransport(_Api()))
    monkeypatch.setattr(sc, "client", client)
    # consoles of a fixed width and no colour, whatever terminal the module was imported under (a
    # pytest-xdist worker has none: 80 columns cut the names): any ESC then came from a run's name
    monkeypatch.setattr(sc, "out", Console(color_system=None, width=250))
    monkeypatch.setattr(rest, "err", Console(stderr=True, color_system=None, width=250))  # call()'s API errors


def test_aero_runs_survives_markup_and_escapes_in_names(fake_api):
    res = CliRunner().invoke(app, ["runs"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "[/oops]" in res.output and "[bold]x" in res.output
    assert "\x1b" not in res.output and "\\x1b[31mred" in res.output


def test_api_errors_with_markup_are_printed_literally(fake_api):
    res = CliRunner().invoke(app, ["submit", "--name", "x"])
    assert res.exit_code == 1
    assert "bad [/oops]" in res.output and "\x1b" not in res.output and "body.[/x]" in res.output
