"""Platform commands: up, submit, runs, token (filled in by the platform work)."""

from cli.main import app  # noqa: F401
