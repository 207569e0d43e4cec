"""trainer/spec/ is what the API may import (docs/architecture.md §1): every module in it loads
without torch, and of the rest of trainer/ it reads only the registries the run config is built
from. A fresh interpreter imports each module, so nothing a test imported earlier hides a heavy
import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.test_import_graph import import_graph

ROOT = Path(__file__).resolve().parents[3]
SPEC = sorted(f"trainer.spec.{p.stem}" for p in (ROOT / "trainer" / "spec").glob("*.py") if p.stem != "__init__")
# What the run config is built from, outside trainer/spec/: each registry is stdlib only (the method
# modules it fills itself from import torch only inside their step functions).
REGISTRIES = {"trainer.methods.spec", "trainer.tasks.registry", "trainer.models.catalog"}
HEAVY = ("torch", "transformers", "ray", "verl", "vllm", "psutil")


def test_every_spec_module_loads_without_torch():
    assert len(SPEC) >= 10 and "trainer.spec.config" in SPEC
    code = (f"import importlib, json, sys\nfor m in {SPEC!r}:\n    importlib.import_module(m)\n"
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout)
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []
    # nothing of the engines, the samplers or the run plumbing
    assert [m for m in loaded if m.startswith(("trainer.platform", "trainer.embedded", "trainer.rollout",
                                               "trainer.verl", "trainer.bench"))] == []


def test_spec_modules_import_only_spec_common_and_the_registries():
    graph = import_graph()  # the imports that run (TYPE_CHECKING ones left out)
    outside = {f"{m} -> {dep}" for m in SPEC for dep in graph[m]
               if not dep.startswith(("trainer.spec.", "common.")) and dep not in REGISTRIES}
    assert outside == set()
