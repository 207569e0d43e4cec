"""scripts/gpu_check.py on CPU at tiny size, in a subprocess where pydantic cannot be imported:
the GPU machine has torch and transformers only, and the script must run from the source tree."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_runs_with_torch_and_transformers_only(tmp_path):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "pydantic.py").write_text('raise ImportError("no pydantic on the GPU machine")\n')
    out = tmp_path / "gpu.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--tiny", "--steps", "2",
                           "--prompts", "2", "--sft-steps", "1", "--json", str(out)],
                          cwd=tmp_path, env={"PYTHONPATH": str(hide), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "AERO/GRPO step-time ratio" in proc.stdout
    r = json.loads(out.read_text())
    assert set(r["summary"]) == {"grpo", "aero", "aero-r4"} and len(r["rows"]) == 6
    for row in r["rows"]:
        assert row["step_s"] >= row["rollout_s"] + row["train_s"] - 1e-6
        assert row["generated"] <= 2 * 4  # never past the equal budget P * n_total
    grpo = [row for row in r["rows"] if row["method"] == "grpo"]
    assert all(row["gen_calls"] == 1 and row["generated"] == row["trained"] == 8 for row in grpo)
    assert r["ratio_aero_grpo"]["aero"] == r["summary"]["aero"]["step_s"] / r["summary"]["grpo"]["step_s"]
