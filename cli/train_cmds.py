"""Trainer commands: pretrain, train, eval, bench."""

from cli.main import app  # noqa: F401
