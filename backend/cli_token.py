"""``aero token create NAME`` (the CLI wraps this): create an API token, print it once."""

from __future__ import annotations

from backend.db.migrate import migrate
from backend.db.session import session_scope
from backend.db.tokens import create_token as _create
from backend.settings import Settings, get_settings


def create_token(name: str, settings: Settings | None = None) -> str:
    """Create a token called ``name`` in the configured store (migrating it first) and return
    the plaintext token; only its SHA-256 hash is stored, so it cannot be shown again."""
    settings = settings or get_settings()
    migrate(settings.database_url)
    with session_scope(settings.database_url) as session:
        _, token = _create(session, name)
    return token
