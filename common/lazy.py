"""A package's public names, imported from their modules on first use (PEP 562): importing the
package stays cheap (no torch until a name that needs it is read). Stdlib only."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, tuple[str, ...]]) -> tuple[list[str], Callable[[str], Any]]:
    """(``__all__``, ``__getattr__``) for ``package`` from ``{module: names it exports}``:
    ``__all__, __getattr__ = lazy_exports(__name__, {...})``."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{where[name]}"), name)

    return sorted(where), __getattr__
