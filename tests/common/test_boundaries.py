"""``common`` is the contract every layer imports (the dashboard included, which otherwise talks
HTTP only), so it must import nothing but the standard library: checked on every import
statement (tests/common/test_dotted.py checks sys.modules of a fresh interpreter)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_common_imports_only_the_standard_library():
    files = sorted((ROOT / "common").glob("*.py"))
    assert len(files) >= 3
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            for name in names:
                top = name.split(".")[0]
                assert top == "__future__" or top == "common" or top in sys.stdlib_module_names, f"{f.name} imports {name}"

