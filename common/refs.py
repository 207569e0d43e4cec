"""``"module:attribute"`` references, how the registries (tasks, engines) name the code they
load on first use, so that importing a registry stays light (stdlib only)."""

from __future__ import annotations

from importlib import import_module
from typing import Any


def load(ref: str) -> Any:
    """The object a ``"module:attribute"`` reference names (imports the module)."""
    module, _, attr = ref.partition(":")
    return getattr(import_module(module), attr)
