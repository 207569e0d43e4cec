"""The `aero` command line. Trainer commands live in cli/train_cmds.py, `aero submit` / `runs` in
cli/submit_cmds.py, the platform's processes (`aero up`, `worker`, `reaper`) in
cli/platform_cmds.py, `aero token` in cli/token_cmds.py, `aero compare` in cli/compare_cmds.py;
each module collects its commands on a Typer of its own and this module, the only one that
imports them all, merges them into the one app. They never import this module back, so
importing one for its helpers (as the tests do) needs no particular import order.

A command's error is reported in one or two lines, what failed and what to do, with no
traceback (cli/errors.py); ``AERO_DEBUG=1`` or ``aero --debug COMMAND`` shows the traceback."""

import warnings
from typing import Annotated

import typer

from cli import access_cmds, compare_cmds, model_cmds, platform_cmds, rollout_cmds, run_cmds, store_cmds, submit_cmds, token_cmds, train_cmds
from cli.errors import AeroTyper
from trainer.spec.config_renames import ConfigDeprecationWarning

# A run config (file or --set) that names a renamed field is read as the new one; say so.
warnings.filterwarnings("default", category=ConfigDeprecationWarning)

# Rich pretty tracebacks only when debugging (AeroTyper turns them on), never with locals: a
# frame's locals hold tokens and database passwords.
app = AeroTyper(help="AERO Lab: GRPO, DAPO and AERO post-training runs, on a laptop or a cluster.",
                no_args_is_help=True, pretty_exceptions_enable=False, pretty_exceptions_show_locals=False)


@app.callback()
def options(debug: Annotated[bool, typer.Option("--debug", help="Show the full traceback of an error (as AERO_DEBUG=1 does).")] = False):
    if debug:
        app.enable_debug()


# Added without a name, a Typer's commands join the top level. The order here is the order of
# `aero --help`; `aero token` comes last, where Typer lists a group after the plain commands.
app.add_typer(submit_cmds.commands)
app.add_typer(platform_cmds.commands)
app.add_typer(access_cmds.commands)
app.add_typer(run_cmds.commands)
app.add_typer(compare_cmds.commands)
app.add_typer(rollout_cmds.commands)
app.add_typer(train_cmds.commands)
app.add_typer(store_cmds.commands)
app.add_typer(model_cmds.models_app, name="models")
app.add_typer(token_cmds.token_app, name="token")

if __name__ == "__main__":
    app()
