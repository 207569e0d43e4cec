"""backend/db/runs.py is the only writer of a run's status: a static check over the source.

A status written anywhere else would bypass the state machine's guarded transitions (allowed
sources, ownership, the orphan rule), so every module outside runs.py is read for the ways
code can write the column: ``.values(status=...)`` or ``.values({"status": ...})`` on an
UPDATE, an assignment to ``<obj>.status``, ``setattr(obj, "status", ...)``, and raw SQL text
that updates ``runs`` and sets ``status``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("backend", "worker", "cli", "trainer", "dashboard")
OWNER = Path("backend/db/runs.py")
RAW_SQL = re.compile(r"update\s+\"?runs\"?\b.*\bset\b.*\bstatus\s*=", re.IGNORECASE | re.DOTALL)


def _is_status_key(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == "status"


def status_writes(source: str) -> list[int]:
    """Line numbers in ``source`` that write a ``status`` column or attribute."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "values":
            dict_keys = [k for a in node.args if isinstance(a, ast.Dict) for k in a.keys]
            dict_keys += [k for kw in node.keywords if kw.arg is None and isinstance(kw.value, ast.Dict) for k in kw.value.keys]
            if any(kw.arg == "status" for kw in node.keywords) or any(_is_status_key(k) for k in dict_keys):
                lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr == "status" for t in targets):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            if len(node.args) >= 2 and _is_status_key(node.args[1]):
                lines.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and RAW_SQL.search(node.value):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_detector_finds_each_kind_of_status_write():
    src = '''
s.execute(update(Run).where(Run.id == 1).values(status="failed"))
s.execute(update(Run).values({"status": "queued"}))
s.execute(update(Run).values(**{"status": "queued"}))
run.status = "cancelled"
setattr(run, "status", "succeeded")
s.execute(text("UPDATE runs SET status = 'failed' WHERE id = 1"))
s.execute(update(Run).values(heartbeat_at=now))   # not a status write
resp.status_code = 200                              # not either
'''
    assert status_writes(src) == [2, 3, 4, 5, 6, 7]


def test_no_module_outside_backend_db_runs_writes_the_status_column():
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel == OWNER or "alembic" in rel.parts:  # migrations change the schema, not runs
                continue
            offenders += [f"{rel}:{line}" for line in status_writes(path.read_text())]
    assert offenders == [], "status is written only by backend/db/runs.py's transitions"


def test_runs_py_itself_writes_status_only_through_its_transition_helper():
    """Inside runs.py every status write is ``_move`` (which checks TRANSITIONS) or request_cancel's
    single UPDATE; a new raw write there would skip the table."""
    src = (ROOT / OWNER).read_text()
    tree = ast.parse(src)
    owners = {}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef):
            for line in status_writes(ast.unparse(fn)):
                owners.setdefault(fn.name, []).append(line)
    assert set(owners) == {"_move", "request_cancel"}
