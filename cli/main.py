"""The `aero` command line. Trainer commands live in cli/train_cmds.py, platform commands in
cli/platform_cmds.py, `aero compare` in cli/compare_cmds.py; all register on this one Typer app."""

import typer

app = typer.Typer(help="AERO Lab: GRPO, DAPO and AERO post-training runs, on a laptop or a cluster.",
                  no_args_is_help=True, pretty_exceptions_show_locals=False)

from cli import compare_cmds, platform_cmds, train_cmds  # noqa: E402,F401  (register commands)

if __name__ == "__main__":
    app()
