"""The typed view of RunConfig (trainer/spec/config.py, under TYPE_CHECKING) is what mypy and IDEs
see; the runtime class is built from the method registry. These keep the two equal, and show
that mypy (as `make lint` runs it) checks a use of a method section's field."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from trainer.methods.spec import all_sections
from trainer.tasks.registry import task_sections

ROOT = Path(__file__).resolve().parents[3]


def typed_view() -> tuple[dict[str, str], dict[str, str]]:
    """({field: annotation} of the TYPE_CHECKING RunConfig, {imported name: module}) in config.py."""
    tree = ast.parse((ROOT / "trainer" / "spec" / "config.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            imports = {a.name: n.module for n in node.body if isinstance(n, ast.ImportFrom) for a in n.names}
            for cls in node.body:
                if isinstance(cls, ast.ClassDef) and cls.name == "RunConfig":
                    fields = {s.target.id: ast.unparse(s.annotation) for s in cls.body
                              if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
                    return fields, imports
    raise AssertionError("trainer/spec/config.py has no typed RunConfig under TYPE_CHECKING")


def test_the_typed_view_lists_every_registered_section_with_its_model():
    fields, imports = typed_view()
    sections = (*all_sections(), *task_sections())  # the methods' and the tasks'
    want = {sec.name: sec.model.__name__ for sec in sections}
    assert fields == want, "update the typed RunConfig in trainer/spec/config.py to the registries' sections"
    for sec in sections:
        assert imports[sec.model.__name__] == sec.model.__module__, sec.name


def test_the_runtime_config_has_the_same_sections():
    from trainer.spec.config import RunConfig, parse_run_config

    fields, _ = typed_view()
    assert set(fields) <= set(RunConfig.model_fields)
    cfg = parse_run_config({"method": "aero"})
    assert type(cfg.aero).__name__ == fields["aero"] and cfg.aero.n_explore == 8


def test_mypy_checks_a_method_sections_field(tmp_path):
    api = pytest.importorskip("mypy.api")
    probe = tmp_path / "probe.py"  # outside trainer/, whose unchecked modules' errors are silenced
    probe.write_text(textwrap.dedent("""
        from trainer.spec.config import RunConfig

        def explore(cfg: RunConfig) -> int:
            return cfg.aero.n_explore + cfg.aero.n_explroe
    """))
    out, err, code = api.run([str(probe), "--config-file", str(ROOT / "pyproject.toml")])
    assert code == 1, out + err
    lines = [line for line in out.splitlines() if "probe.py" in line]
    assert len(lines) == 1 and '"AEROConfig" has no attribute "n_explroe"' in lines[0], out
