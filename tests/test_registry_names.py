"""Nothing decides by a registered name outside the package that owns it (as the status-writer
scan does for status writes): a comparison (==, !=, in, not in) with a name as a string constant,
alone or in a literal tuple/list/set, is a decision that belongs to the registry entry's fields.

- methods (trainer/methods/spec.py ``MethodSpec``: ``baseline``, ``sections``, ``needs``, ``verl``...),
  outside trainer/methods/;
- tasks (trainer/tasks/registry.py ``TaskSpec``: ``source``, ``section``, ``build``, ``engines``...),
  outside trainer/tasks/;
- training engines (trainer/spec/engine_registry.py ``EngineSpec``: ``distributed``, ``model_shapes``,
  ``uses_ray``...), outside the engine's own package (trainer/<engine>/) and the registry;
- samplers (trainer/spec/sampler_registry.py ``SamplerSpec``: ``decodes``, ``keyed``, ``stream``,
  ``tensor_parallel``, ``devices``, ``runs_ahead``, ``verl_rollout``...), outside trainer/rollout/ and
  the registry.

Choosing names to run (a demo's list, a menu's default) is data, not a comparison, and is not
flagged. Migrations are frozen history and are skipped. benchmarks/ is scanned for methods,
tasks and samplers; for engines it is not, because a benchmark that compares two named engines chooses them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from trainer.spec.engine_registry import ENGINE_NAMES
from trainer.methods.spec import method_names
from trainer.spec.sampler_registry import SAMPLER_NAMES
from trainer.tasks.registry import TASK_NAMES

ROOT = Path(__file__).resolve().parents[1]
ALL = ("backend", "cli", "common", "dashboard", "trainer", "worker", "benchmarks", "scripts", "examples")
MIGRATIONS = ROOT / "backend" / "alembic"
# kind -> (names, packages scanned, paths where the names are the owner's to compare, where to decide instead)
REGISTRIES = {
    "method": (frozenset(method_names()), ALL, (ROOT / "trainer" / "methods",), "the method's spec (trainer/methods/spec.py)"),
    "task": (frozenset(TASK_NAMES), ALL, (ROOT / "trainer" / "tasks",), "the task's entry (trainer/tasks/registry.py)"),
    "engine": (frozenset(ENGINE_NAMES), tuple(p for p in ALL if p != "benchmarks"),
               (ROOT / "trainer" / "spec" / "engine_registry.py", *(ROOT / "trainer" / e for e in ENGINE_NAMES)),
               "the engine's entry (trainer/spec/engine_registry.py)"),
    "sampler": (frozenset(SAMPLER_NAMES), ALL, (ROOT / "trainer" / "spec" / "sampler_registry.py", ROOT / "trainer" / "rollout"),
                "the sampler's spec (trainer/spec/sampler_registry.py)"),
}


def _named(node: ast.AST, names: frozenset[str]) -> list[str]:
    if isinstance(node, ast.Constant) and node.value in names:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
    return []


def name_comparisons(tree: ast.AST, names: frozenset[str]) -> list[tuple[int, str]]:
    """(line, name) of every comparison with one of ``names`` in ``tree``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                out += [(node.lineno, name) for name in _named(side, names)]
    return out


def test_the_scan_finds_what_it_looks_for():
    code = 'a = m == "grpo"\nb = "aero" in methods\nc = m in ("dapo", "x")\nd = ["grpo", "aero"]\ne = m == "GRPO"'
    assert name_comparisons(ast.parse(code), REGISTRIES["method"][0]) == [(1, "grpo"), (2, "aero"), (3, "dapo")]
    code = 'a = cfg.task == "strata"\nb = cfg.engine != "embedded"\nc = t in ("code", "math")\nd = {"code": 1}'
    assert name_comparisons(ast.parse(code), REGISTRIES["task"][0]) == [(1, "strata"), (3, "code"), (3, "math")]
    assert name_comparisons(ast.parse(code), REGISTRIES["engine"][0]) == [(2, "embedded")]
    code = 'a = cfg.rollout.sampler == "hf"\nb = cfg.rollout.sampler != "vllm"\nc = {"hf": 1}\nd = make_sampler("vllm")'
    assert name_comparisons(ast.parse(code), REGISTRIES["sampler"][0]) == [(1, "hf"), (2, "vllm")]


@pytest.mark.parametrize("kind", list(REGISTRIES))
def test_no_package_compares_registered_names_outside_their_owner(kind):
    names, packages, owners, instead = REGISTRIES[kind]
    found = []
    for pkg in packages:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path.is_relative_to(MIGRATIONS) or any(path == o or path.is_relative_to(o) for o in owners):
                continue
            for line, name in name_comparisons(ast.parse(path.read_text(), str(path)), names):
                found.append(f"{path.relative_to(ROOT)}:{line}: compares with {kind} {name!r}")
    assert found == [], f"decide by {instead}, not the {kind}'s name:\n" + "\n".join(found)
