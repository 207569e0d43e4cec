"""Helpers shared by the CLI commands: `--set key=value` overrides and config errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from trainer.spec.config import ConfigError
from trainer.spec.config_renames import renamed_fields
from common.dotted import set_path
from trainer.spec.safetext import FORBIDDEN

console = Console(stderr=True)


def safe(text: Any) -> str:
    """User or server text (run and sweep names, tags, error messages, paths) ready for a Rich
    markup string: control characters shown as escapes (an ANSI sequence in an old run's name
    must not recolour or rewrite the terminal) and markup escaped ("[/oops]" is a name, not a
    closing tag that crashes the whole table)."""
    s = "" if text is None else str(text)
    if any(ord(c) in FORBIDDEN for c in s):
        s = "".join(c.encode("unicode_escape").decode("ascii") if ord(c) in FORBIDDEN else c for c in s)
    return escape(s)


def parse_value(text: str) -> Any:
    """JSON when it parses (numbers, booleans, lists, null), else the plain string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_sets(sets: list[str] | None) -> dict[str, Any]:
    """['aero.k=2', 'steps=100'] -> {'aero': {'k': 2}, 'steps': 100}. A renamed field is set
    under its new name, with a deprecation warning (``sampler_rng=per-row`` is
    ``rollout.rng=per-row``), so it overrides a config that already has the new one."""
    out: dict[str, Any] = {}
    for item in sets or []:
        if "=" not in item:
            raise typer.BadParameter(f"--set expects key=value (e.g. aero.k=2); got {item!r}")
        key, _, value = item.partition("=")
        set_path(out, key.strip(), parse_value(value.strip()))
    return renamed_fields(out)


def read_json(path: Path) -> Any:
    """A JSON file the operator named (a run config): one that does not parse is reported with
    its path and position (cli/errors.py); a missing or unreadable one by its OSError."""
    from cli.errors import OperatorError

    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise OperatorError(f"{path} is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})",
                            "Fix the file: a JSON object of run config fields.") from None


def fail_config(err: ConfigError) -> None:
    """Print each bad field and what to do, then exit with status 2."""
    console.print("[bold red]Invalid run config[/] (nothing was run):")
    for loc, msg in err.issues:
        console.print(f"  [red]{safe(loc)}[/]: {safe(msg)}")
    raise typer.Exit(2)
