"""`aero --help` and every command's help: Typer renders help texts as Rich markup, so a
bracketed "[env ...]" vanishes (leaving "API base URL ."), RST-style ``double backticks`` print
as they are, and a line break inside a command's first paragraph breaks its row in `aero --help`."""

import inspect

import click
import typer
from rich.markup import render
from typer.testing import CliRunner

from cli.main import app

runner = CliRunner()


def commands(group: click.Group, prefix: str = "aero") -> list[tuple[str, click.Command]]:
    """Every command and group under the app, with its full name."""
    out = []
    for name, cmd in group.commands.items():
        out.append((f"{prefix} {name}", cmd))
        if hasattr(cmd, "commands"):  # typer 0.29 ships its own click: not a click.Group
            out += commands(cmd, f"{prefix} {name}")
    return out


ALL = commands(typer.main.get_command(app))


def test_no_help_text_is_eaten_as_rich_markup():
    texts = [(name, cmd.help or "") for name, cmd in ALL]
    texts += [(f"{name} {p.opts[0] if p.opts else p.name}", getattr(p, "help", None) or "") for name, cmd in ALL for p in cmd.params]
    assert len(texts) > 40
    for where, text in texts:
        assert render(text).plain == text, f"{where}: Rich markup changes {text!r}"


def test_root_help_lists_every_command_without_backticks_or_broken_rows():
    res = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    assert "`" not in res.output
    assert "('aero up' starts one for you)" in res.output
    for name, cmd in ALL:
        first = inspect.cleandoc(cmd.help or "").split("\n\n")[0]
        assert "\n" not in first, f"{name}: the first paragraph of its help must be one line"
        assert "``" not in (cmd.help or ""), name


def test_every_command_help_renders():
    for name, _ in ALL:
        res = runner.invoke(app, [*name.split()[1:], "--help"], env={"COLUMNS": "200"})
        assert res.exit_code == 0, (name, res.output)
        assert " ." not in res.output and "``" not in res.output, (name, res.output)
