"""The soak's report: printed as a table (rich when installed) and written as JSON (``--json``)."""

from __future__ import annotations

import json
from pathlib import Path


def print_report(report: dict) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich is a dependency of the CLI
        Console = Table = None  # type: ignore[assignment,misc]

    def rows(section: str, d: dict) -> list[tuple[str, str, str]]:
        return [(section, str(k), json.dumps(v) if isinstance(v, (dict, list)) else str(v)) for k, v in d.items()]

    out: list[tuple[str, str, str]] = []
    out += rows("setup", report["setup"])
    out += rows("runs", report["runs"])
    out += rows("faults", report["fault_counts"])
    for f in report["faults"]:
        out.append(("fault", f"{f['kind']} @ {f['at_s']}s", json.dumps({k: v for k, v in f.items() if k not in ("kind", "at_s")})))
    for s in report["skipped"]:
        out.append(("skipped", s["kind"], s["why"]))
    out += rows("latency", report["latency"])
    out += rows("sse", report["sse"])
    out += rows("flood", report["flood"])
    out += rows("fair share", report["fair_share"])
    for i in report["invariants"]:
        verdict = "ok" if i["ok"] else f"BROKEN x{i['broken']}"
        detail = f"checked {i['checked']}" + (f"; {i['note']}" if i["note"] else "") + ("".join(f"\n  {e}" for e in i["examples"]))
        out.append(("invariant", f"{i['name']}: {verdict}", detail))
    out.append(("result", "violations", str(len(report["violations"]))))
    if Table is not None:
        t = Table("section", "count", "value", title="AERO Lab soak", show_lines=False)
        for r in out:
            t.add_row(*r)
        Console(width=200).print(t)
    else:
        for r in out:
            print(f"{r[0]:<10} {r[1]:<48} {r[2]}")


def write_json(report: dict, path: Path) -> None:
    path.write_text(json.dumps(report, indent=2, default=str))
