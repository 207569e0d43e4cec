"""Dependency directions for backend/ (docs/architecture.md §1): it imports trainer.config, the
method registry trainer.methods.spec (stdlib) and the numpy-only statistics modules
trainer.core.{passk,reach,stats} (no torch), never the worker or the dashboard, and enqueues by
task name."""

import ast
import subprocess
import sys
from pathlib import Path

BACKEND = Path(__file__).resolve().parents[2] / "backend"
ALLOWED_TRAINER = ("trainer.config", "trainer.operator_policy", "trainer.methods.spec", "trainer.tasks.registry",
                   "trainer.engines", "trainer.resources",
                   "trainer.core.passk", "trainer.core.reach", "trainer.core.stats")
FORBIDDEN = ("worker", "dashboard", "torch", "transformers", "streamlit", "cli")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_backend_sources_import_only_allowed_packages():
    files = list(BACKEND.rglob("*.py"))
    assert len(files) > 20
    for f in files:
        for name in _imports(f):
            top = name.split(".")[0]
            assert top not in FORBIDDEN, f"{f.relative_to(BACKEND.parent)} imports {name}"
            if top == "trainer":
                assert name in ALLOWED_TRAINER, f"{f.relative_to(BACKEND.parent)} imports {name}"


def test_importing_the_app_loads_no_torch_and_no_worker():
    code = ("import sys, backend.main, backend.db, backend.queue, backend.cli_token; "
            "bad = [m for m in ('torch', 'worker', 'dashboard', 'trainer.embedded.loop', 'trainer.tasks.arithmetic', "
            "'trainer.tasks.code') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=BACKEND.parent, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
