"""``python -m trainer.verl``, the documented cluster command (docs/engines.md "Commands"), run
as the operator runs it: a subprocess with a JSON config file. The bad-config tests need no
verl (the config is refused before verl is imported) and run in the main suite too; the real
run importorskips verl (tests/trainer/verl/test_real_fit.py has the same tiny CPU setup)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TINY_GRPO = {"method": "grpo", "device": "cpu", "steps": 2, "batch_prompts": 8, "n_total": 8, "eval_every": 0,
             "eval_problems": 8, "eval_n": 4, "seed": 3}


def cli(tmp_path: Path, config: dict | str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    path = tmp_path / "run.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AERO_")}  # the default policy
    return subprocess.run([sys.executable, "-m", "trainer.verl", "--config", str(path), "--out", str(tmp_path / "out"),
                           *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_a_bad_config_exits_2_naming_each_field(tmp_path):
    done = cli(tmp_path, {**TINY_GRPO, "steps": 0, "n_total": 1})
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert any(line.strip().startswith("steps:") for line in lines), done.stderr
    assert any(line.strip().startswith("n_total:") for line in lines), done.stderr
    assert not (tmp_path / "out").exists()  # nothing was run


def test_the_operators_caps_apply(tmp_path):
    """The policy is the environment's (RunPolicy.from_env), as for `aero train`."""
    path = tmp_path / "run.json"
    path.write_text(json.dumps(TINY_GRPO))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AERO_")} | {"AERO_MAX_STEPS": "1"}
    done = subprocess.run([sys.executable, "-m", "trainer.verl", "--config", str(path), "--out", str(tmp_path / "o")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert any(line.strip().startswith("steps:") and "AERO_MAX_STEPS" in line for line in done.stderr.splitlines())


@pytest.mark.parametrize(("config", "args", "named"), [
    ("{not json", (), "not JSON"),
    ("[1, 2]", (), "JSON object"),
    (json.dumps(TINY_GRPO), ("--set", "steps"), "key=value"),
    (json.dumps(TINY_GRPO), ("--set", "steps=-3"), "steps:"),
    (json.dumps(TINY_GRPO), ("--set", "aero.bogus=1"), "aero.bogus"),
])
def test_unreadable_configs_and_bad_overrides_exit_2(tmp_path, config, args, named):
    done = cli(tmp_path, config, *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert named in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_documented_command_trains_a_tiny_grpo_run(tmp_path):
    pytest.importorskip("verl")
    t0 = time.monotonic()
    done = cli(tmp_path, TINY_GRPO, timeout=800)
    wall = time.monotonic() - t0
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])  # the last line: the summary
    assert summary["status"] == "completed" and summary["last_step"] == 2 and "final_eval" not in summary
    assert "step 2/2" in done.stdout
    out = tmp_path / "out"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["rollout/generated"] == r["rollout/trained"] == 8 * 8 for r in rows)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["engine"] == "verl" and cfg["method"] == "grpo" and cfg["preset"] == "tiny"
    print(f"\n[python -m trainer.verl] tiny GRPO, 2 steps on the CPU: {wall:.0f} s wall")
