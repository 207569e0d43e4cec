"""Dependency directions for backend/ (docs/architecture.md §1): of the trainer it imports the run
config's package trainer.spec (pydantic + stdlib, no torch: tests/trainer/spec/test_spec_light.py)
and a small named set besides, the method and task registries (stdlib) and the numpy-only
statistics modules; never the worker or the dashboard, and it enqueues by task name."""

import ast
import subprocess
import sys
from pathlib import Path

BACKEND = Path(__file__).resolve().parents[2] / "backend"
# Every trainer.spec module, and of the rest of trainer/ these only (each one in use):
OTHER_TRAINER = frozenset({
    "trainer.methods.spec",  # the method registry: a comparison's baseline, the methods the API lists
    "trainer.tasks.registry",  # the task registry: a sweep's retasked config
    "trainer.core.reach",  # compute-to-reach curves (numpy)
    "trainer.core.stats",  # confidence intervals and paired tests (numpy, scipy)
})
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
    other = set()
    for f in files:
        for name in _imports(f):
            top = name.split(".")[0]
            assert top not in FORBIDDEN, f"{f.relative_to(BACKEND.parent)} imports {name}"
            if top == "trainer" and not name.startswith("trainer.spec."):
                assert name in OTHER_TRAINER, f"{f.relative_to(BACKEND.parent)} imports {name}"
                other.add(name)
    assert other == OTHER_TRAINER, f"no longer imported by backend/, drop from OTHER_TRAINER: {OTHER_TRAINER - other}"


def test_importing_the_app_loads_no_torch_and_no_worker():
    code = ("import sys, backend.main, backend.db, backend.queue, backend.cli_token; "
            "bad = [m for m in ('torch', 'worker', 'dashboard', 'trainer.embedded.loop', 'trainer.tasks.arithmetic', "
            "'trainer.tasks.code') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=BACKEND.parent, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
