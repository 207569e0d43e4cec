"""docs/architecture.md §1: the dashboard talks to the backend over HTTP only. No module under
dashboard/ may import the store, the backend, the trainer, the worker or torch — checked on the
source (every import statement, nested ones included) and on a fresh interpreter's sys.modules.
It may import ``common`` (metric keys and dotted-path rules, stdlib only, shared by every layer):
tests/common/test_boundaries.py checks that ``common`` imports nothing of the project."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("sqlalchemy", "backend", "trainer", "worker", "torch", "celery", "alembic", "psycopg")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_no_forbidden_imports_in_dashboard_sources():
    files = sorted((ROOT / "dashboard").rglob("*.py"))
    assert len(files) >= 8
    bad = {str(f.relative_to(ROOT)): sorted(m for m in imported_modules(f) if m.split(".")[0] in FORBIDDEN)
           for f in files}
    assert {f: m for f, m in bad.items() if m} == {}


def test_importing_the_dashboard_loads_none_of_them():
    code = ("import sys; import dashboard.client, dashboard.plotting, dashboard.run_charts, dashboard.compare_charts, "
            "dashboard.waterfall_chart, dashboard.arena_chart, dashboard.tables, dashboard.reach_tables, dashboard.forms, "
            "dashboard.ui; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
