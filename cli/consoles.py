"""The two Rich consoles the command modules print through: ``out`` (stdout: tables and results)
and ``err`` (stderr: progress, notes and errors). One shared pair, made at import; a test that
needs a fixed width patches the name in the module that prints (e.g. ``cli.submit_cmds.out``)."""

from rich.console import Console

out = Console()
err = Console(stderr=True)
