"""``aero token create | list | revoke``: API tokens, managed directly in the configured store
(backend/cli_token.py, backend/db/tokens.py), not over the REST API, so the first admin token
can be made before anything runs. Tokens are stored hashed: ``create`` prints one only once."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.table import Table

from cli.common import safe
from cli.consoles import err, out

# cli/main.py adds this to the `aero` app as `aero token`; this module never imports it.
token_app = typer.Typer(help="API tokens (stored hashed; each is printed once).", no_args_is_help=True)

ROLES = ("admin", "member", "viewer")


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="A label for the token (who or what uses it).")],
    role: Annotated[Optional[str], typer.Option("--role", help="admin: everything, tokens and users too; member: submit and "
                                                "change only their own runs and sweeps; viewer: read only. Default: "
                                                "admin for the store's first token (no live admin yet), else member.")] = None,
    user: Annotated[Optional[str], typer.Option("--user", help="The user the token belongs to (created if new; default NAME).")] = None,
):
    """Create an API token in the configured store and print it (only now: it is stored hashed)."""
    from backend.cli_token import create_token

    if role is not None and role not in ROLES:
        err.print(f"[red]--role must be one of {', '.join(ROLES)}[/], not {safe(role)}")
        raise typer.Exit(2)
    tok, role = create_token(name, role=role, user=user)
    err.print(f"{role} token [bold]{safe(name)}[/] for user [bold]{safe(user or name)}[/] created; it is shown only once:")
    print(tok)


@token_app.command("list")
def token_list():
    """Token names and dates (never the tokens)."""
    from backend.db.migrate import migrate
    from backend.db.session import session_scope
    from backend.db.tokens import list_tokens_with_users
    from backend.settings import get_settings

    url = get_settings().database_url
    migrate(url)
    t = Table("id", "name", "user", "role", "created", "last used", "revoked")
    with session_scope(url) as s:
        for row, user in list_tokens_with_users(s):
            t.add_row(str(row.id), safe(row.name), safe(user), row.role, str(row.created_at)[:19],
                      str(row.last_used_at or "")[:19], str(row.revoked_at or "")[:19])
    out.print(t)


@token_app.command("revoke")
def token_revoke(name: str):
    """Revoke every live token called NAME (recorded in the audit log)."""
    from backend.cli_token import revoke_tokens

    n = revoke_tokens(name)
    err.print(f"revoked {n} token(s) named {safe(name)}")
