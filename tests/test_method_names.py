"""Nothing outside trainer/methods/ decides by a method's name (as the status-writer scan does
for status writes): a comparison (==, !=, in, not in) with a registered method's name as a
string constant, alone or in a literal tuple/list/set, is a decision that belongs to the method's
spec (``baseline``, ``sections``, ``needs``, ``verl``...). Choosing methods to run (a demo's
list, a menu's default) is data, not a comparison, and is not flagged. Migrations are frozen
history and are skipped."""

from __future__ import annotations

import ast
from pathlib import Path

from trainer.methods.spec import method_names

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("backend", "cli", "common", "dashboard", "trainer", "worker", "benchmarks", "scripts")
SKIP = (ROOT / "trainer" / "methods", ROOT / "backend" / "alembic")
NAMES = frozenset(method_names())


def _named(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and node.value in NAMES:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in NAMES]
    return []


def method_name_comparisons(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, method name) of every comparison with a method name in ``tree``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                out += [(node.lineno, name) for name in _named(side)]
    return out


def test_the_scan_finds_what_it_looks_for():
    code = 'a = m == "grpo"\nb = "aero" in methods\nc = m in ("dapo", "x")\nd = ["grpo", "aero"]\ne = m == "GRPO"'
    assert method_name_comparisons(ast.parse(code)) == [(1, "grpo"), (2, "aero"), (3, "dapo")]


def test_no_package_compares_method_names_outside_the_methods_package():
    found = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if any(path.is_relative_to(s) for s in SKIP):
                continue
            for line, name in method_name_comparisons(ast.parse(path.read_text(), str(path))):
                found.append(f"{path.relative_to(ROOT)}:{line}: compares with {name!r}")
    assert found == [], "decide by the method's spec (trainer/methods/spec.py), not its name:\n" + "\n".join(found)
