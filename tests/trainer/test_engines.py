"""The engine registry (trainer/spec/engine_registry.py) and the entry point (trainer/platform/run.py):
every registered engine resolves, the entry point trains on the engine the config names, and a new
engine is its package plus one registration (shown with a throwaway engine written to a temporary
package)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from trainer.spec.config import parse_run_config
from common.refs import load
from trainer.platform.run import run_training
from trainer.spec.config_rules import engine_issues
from trainer.spec.engine_registry import ENGINE_NAMES, ENGINE_SPECS, EngineSpec, get_engine
from trainer.methods.spec import specs
from trainer.platform.sinks import MemorySink
from trainer.tasks.registry import TASK_SPECS

TOY_ENGINE = textwrap.dedent('''
    """A throwaway engine: one step that reports its config back."""
    def run(cfg, out_dir, sink, *, should_stop=None, progress=None, policy=None):
        sink.log(1, {"toy/steps": float(cfg.steps)})
        if progress is not None:
            progress(1, 1, {})
        return {"status": "completed", "last_step": 1, "final_eval": None, "engine": "toy"}

    def rules(cfg):
        return [("seed", "the toy engine needs an even seed")] if cfg.seed % 2 else []
''')


def test_every_registered_engine_resolves_and_verl_loads_only_when_a_run_uses_it():
    code = ("import sys; from common.refs import load; from trainer.spec.engine_registry import ENGINE_SPECS\n"
            "for s in ENGINE_SPECS.values():\n"
            "    assert callable(load(s.run)), s.name\n"
            "    assert s.rules is None or callable(load(s.rules)), s.name\n"
            "print(sorted(m for m in ('verl', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # the verl engine's entry and rules resolve without verl or Ray


def test_the_engines_methods_and_tasks_name_exist():
    named = {e for s in specs() for e in s.needs.engines} | {e for t in TASK_SPECS.values() for e in t.engines}
    assert named <= set(ENGINE_NAMES), named - set(ENGINE_NAMES)
    with pytest.raises(ValueError, match="unknown engine 'nope'; known: embedded, verl"):
        get_engine("nope")


def test_the_verl_rules_come_from_the_registry_and_refuse_at_parse():
    cfg = parse_run_config({"engine": "verl", "method": "grpo"})
    assert engine_issues(cfg) == []
    bad = cfg.model_copy(update={"task": "strata"})
    assert [f for f, _ in engine_issues(bad)] == ["task"]
    assert engine_issues(parse_run_config({})) == []  # the embedded engine has no rules of its own


def test_a_new_engine_is_its_package_plus_one_registration(tmp_path, monkeypatch):
    pkg = tmp_path / "toy_engine_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(TOY_ENGINE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(ENGINE_SPECS, "toy", EngineSpec(
        "toy", "a throwaway engine", run="toy_engine_pkg:run", rules="toy_engine_pkg:rules",
        own_trackers=True, gpu_by_default=True))

    # the config's Literal is built from the registry at import; a registered engine is in it
    cfg = parse_run_config({"steps": 3, "seed": 1}).model_copy(update={"engine": "toy"})
    assert engine_issues(cfg) == [("seed", "the toy engine needs an even seed")]
    sink, seen = MemorySink(), []
    summary = run_training(cfg, tmp_path / "out", sink, progress=lambda s, n, m: seen.append((s, n)))
    assert summary["engine"] == "toy" and sink.steps[1] == {"toy/steps": 3.0} and seen == [(1, 1)]

    from backend.services.configs import queue_for
    from worker.trackers import tracker_sinks

    assert queue_for(cfg) == "gpu" and queue_for(cfg.model_copy(update={"device": "cpu"})) == "cpu"
    assert tracker_sinks(cfg.model_copy(update={"trackers": ["tensorboard"]}), tmp_path, "r") == []
    assert callable(load(ENGINE_SPECS["toy"].run))
