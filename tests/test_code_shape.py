"""The shape the code holds itself to (docs/architecture.md "Style we hold"), checked on the
source with ast: no function in trainer/ takes more than 12 parameters (group them in a
dataclass instead), and no module imports another module's private name (a leading
underscore): what is shared is public."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_PARAMETERS = 12
PACKAGES = ("backend", "cli", "common", "dashboard", "examples", "trainer", "worker")  # examples/: public names only


def parameter_count(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Positional, keyword-only, *args and **kwargs; a method's self / cls is not counted."""
    a = fn.args
    n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
    first = (a.posonlyargs + a.args)[:1]
    return n - (1 if first and first[0].arg in ("self", "cls") else 0)


def private_imports(tree: ast.AST) -> list[tuple[int, str]]:
    return [(node.lineno, f"{node.module}.{alias.name}") for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module for alias in node.names
            if alias.name.startswith("_") and not alias.name.startswith("__")]


def _trees(packages):
    for pkg in packages:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            yield path.relative_to(ROOT), ast.parse(path.read_text(), str(path))


def test_the_checks_see_what_they_look_for():
    tree = ast.parse("from a.b import _x, y\nclass C:\n    def m(self, a, *b, c, **d): ...\ndef f(a, /, b, *, c): ...")
    assert private_imports(tree) == [(1, "a.b._x")]
    fns = {n.name: parameter_count(n) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert fns == {"m": 4, "f": 3}


def test_no_function_in_trainer_takes_more_than_twelve_parameters():
    wide = [f"{path}:{n.lineno} {n.name} ({parameter_count(n)})" for path, tree in _trees(("trainer",))
            for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and parameter_count(n) > MAX_PARAMETERS]
    assert wide == [], "group the settings in a dataclass:\n" + "\n".join(wide)


def test_no_private_name_is_imported_across_modules():
    found = [f"{path}:{line} imports {name}" for path, tree in _trees(PACKAGES) for line, name in private_imports(tree)]
    assert found == [], "make the shared name public:\n" + "\n".join(found)


MAX_LINES = 500
SIZED = ("backend", "benchmarks", "cli", "common", "dashboard", "examples", "scripts", "trainer", "worker")


def test_no_file_outside_tests_is_over_500_lines():
    """Small files (docs/architecture.md "Style we hold"): a module past 500 lines holds more than
    one job; split it along its seams (benchmarks/soak/, trainer/bench/ are examples). Alembic
    migrations are frozen history and skipped."""
    long = [f"{p.relative_to(ROOT)} ({n})" for pkg in SIZED for p in sorted((ROOT / pkg).rglob("*.py"))
            if "alembic" not in p.parts and (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert long == [], "split these along their seams:\n" + "\n".join(long)
