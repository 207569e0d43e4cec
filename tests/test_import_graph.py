"""No import circles between the project's modules.

A circle works only while every module in it reads the others' names late (inside functions,
or after the partner has finished importing); reorder one import and it fails with a
half-initialised module. The graph is built from the source with ``ast``, so it sees every
import, also those inside functions, without running anything.

Edges: ``import a.b`` and ``from a import b`` point at the most specific project module they
name (``a.b`` when it is a module, else ``a``). The parent packages whose ``__init__`` also
runs are not edges: every ``trainer.tasks.x`` importing ``trainer.tasks.base`` would otherwise
close a circle through ``trainer/tasks/__init__.py``, which Python handles (the package is
already in ``sys.modules``). Imports under ``if TYPE_CHECKING:`` never run, so the test leaves
them out; ``python tests/test_import_graph.py`` prints the circles with and without them.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cli", "trainer", "backend", "worker", "common", "dashboard")

# With the ``if TYPE_CHECKING:`` imports, trainer.spec.config still meets the modules it is built
# from whose rules take a RunConfig (the spec's config_rules, offpolicy, operator_policy, resources;
# the method modules and their registry; the code task's section and the task registry): they name
# it in annotations only, which never run. The script prints that group (docs/architecture.md §1
# says why it stays); the test does not count it, and the last tests keep it to those modules.


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_names(tree: ast.Module, module: str, is_package: bool, type_checking: bool) -> set[str]:
    """Every dotted name the module imports (``from a import b`` gives ``a.b``: a submodule or a
    name in ``a``), at any depth; under ``if TYPE_CHECKING:`` only when ``type_checking``."""
    names: set[str] = set()
    # A relative import counts from the module's package (its own name for an __init__).
    package = module.split(".") if is_package else module.split(".")[:-1]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] if node.level else [])
            source = ".".join(p for p in (base, node.module or "") if p)
            names.update(f"{source}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a project module (None for outside imports)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    modules = project_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = (_resolve(n, modules) for n in imported_names(tree, name, path.name == "__init__.py", type_checking))
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Groups of modules that all reach each other (Tarjan, iterative): each group of two or more
    holds at least one circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    groups.append(group)
            elif nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
    return [g for g in groups if len(g) > 1]


def shortest_cycle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """One shortest circle through the group's first module (breadth-first inside the group)."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for dep in sorted(graph[node] & group):
                if dep == start:
                    return paths[node] + [start]
                if dep not in paths:
                    paths[dep] = paths[node] + [dep]
                    nxt.append(dep)
        frontier = nxt
    raise AssertionError(f"{sorted(group)} is not strongly connected")


def describe(graph: dict[str, set[str]], groups: list[set[str]]) -> str:
    return "\n".join(f"{' -> '.join(shortest_cycle(graph, g))}   (circle among {', '.join(sorted(g))})" for g in groups)


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 100 and "trainer.tasks.verify" in graph  # the walk found the packages
    groups = strongly_connected(graph)
    assert not groups, "import circles:\n" + describe(graph, groups)


def test_cycle_finder_sees_function_level_imports_and_skips_type_checking():
    src = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trainer.spec import config\n"
           "def f():\n    from ..tasks import verify\n    import cli.main\n")
    names = imported_names(ast.parse(src), "trainer.methods.spec", False, type_checking=False)
    assert names == {"typing.TYPE_CHECKING", "trainer.tasks.verify", "cli.main"}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [{"a", "b", "c"}]
    assert shortest_cycle(graph, {"a", "b", "c"}) == ["a", "b", "c", "a"]



def test_config_base_types_join_no_circle():
    """trainer.spec.config_types (Strict, Field, Issues) imports no project module, even for type hints,
    so the config blocks and method sections built on it meet trainer.spec.config through it in no
    circle; trainer.spec.alerts, which needs nothing else of the config, is in none either."""
    graph = import_graph(type_checking=True)
    assert graph["trainer.spec.config_types"] == set()
    in_circles = set().union(*strongly_connected(graph))
    assert not in_circles & {"trainer.spec.config_types", "trainer.spec.alerts"}


# The modules the type-level circle may hold (docs/architecture.md §1): the run config and the
# sections and rules it is built from. Registries, the run plumbing and the engines stay out.
TYPE_LEVEL_CIRCLE = {"trainer.spec.config", "trainer.spec.config_rules", "trainer.spec.offpolicy",
                     "trainer.spec.operator_policy", "trainer.spec.resources", "trainer.tasks.code_config",
                     "trainer.tasks.registry"}


def test_the_type_level_circle_is_the_config_and_what_it_is_built_from():
    graph = import_graph(type_checking=True)
    groups = strongly_connected(graph)
    assert len(groups) <= 1, describe(graph, groups)
    members = set().union(*groups)
    assert {m for m in members if m not in TYPE_LEVEL_CIRCLE and not m.startswith("trainer.methods.")} == set()


def test_the_run_plumbing_reads_only_the_spec():
    """trainer/platform/ (the entry point, placement, sinks, trackers) imports of the project only
    trainer.spec and common, even in functions: the engines it runs are loaded by name from their
    registry, so the plumbing never depends on an engine, a sampler or a method."""
    graph = import_graph()
    outside = {f"{m} -> {dep}" for m in graph if m.startswith("trainer.platform.") for dep in graph[m]
               if not dep.startswith(("trainer.platform.", "trainer.spec.", "common."))}
    assert outside == set()


if __name__ == "__main__":  # the circles, with and without the TYPE_CHECKING imports
    for with_tc in (False, True):
        g = import_graph(type_checking=with_tc)
        found = strongly_connected(g)
        print(f"{'with' if with_tc else 'without'} TYPE_CHECKING imports: {len(found)} circle group(s)")
        print(describe(g, found) or "  none")
    sys.exit(0)
