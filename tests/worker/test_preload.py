"""The worker's main process preloads what a run needs (worker/tasks.py): a pool process forked
from it, the first one or a replacement after a crash, loads the embedded default policy without
importing code of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
import worker.tasks
before = set(sys.modules)
from trainer.embedded.model import load_policy
load_policy("trainer/assets/tiny")
print(" ".join(sorted(m for m in sys.modules if m not in before)))
"""


def test_a_pool_process_loads_the_default_policy_without_new_imports():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    new = out.stdout.split()
    # Without the preload this is ~1,400 modules (transformers' Qwen2 code pulls in scipy.optimize
    # and torch._dynamo): ~2 s of CPU in every new pool process.
    assert len(new) < 20, f"{len(new)} modules imported at the first load: {new[:40]}"
