"""The readable table of scripts/warmup_probe.py's JSON (the probe writes the JSON; this prints it)."""

from __future__ import annotations

def fmt(x, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec) if isinstance(x, float) else str(x)


def table_rows(out: dict) -> tuple[list[str], list[list[str]]]:
    head = ["decode", "allocator", "build s", "1st call s", "2nd call s", "warm-up s", "prefill+", "first N+",
            "rest+", "capture s", "steady ms/step", "cudaMalloc 1st/2nd", "retries 1st/2nd"]
    rows = []
    for group, label in (("decodes", "default"), ("expandable", "expandable")):
        for d, r in out[group].items():
            if "warmup_s" not in r:
                rows.append([d, label, r.get("skipped") or r.get("error", "?")] + [""] * (len(head) - 3))
                continue
            f, s, sp = r["first"], r["second"], r["split"]
            fa, sa = f["allocator"] or {}, s["allocator"] or {}
            rows.append([d, label, fmt(r["build_s"]), fmt(f["seconds"]), fmt(s["seconds"]), fmt(r["warmup_s"]),
                         fmt(sp["prefill_s"]), fmt(sp["first_steps_s"]), fmt(sp["rest_steps_s"]),
                         fmt(f["graph_capture_s"]), fmt(r["steady_device_ms_per_step"] or r["steady_ms_per_step"]),
                         f"{fmt(fa.get('segment.all.allocated'))}/{fmt(sa.get('segment.all.allocated'))}",
                         f"{fmt(fa.get('num_alloc_retries'))}/{fmt(sa.get('num_alloc_retries'))}"])
    u = out.get("update")
    if u:
        if "calls" in u:
            c = u["calls"]
            rows.append(["update", "default", "", fmt(c[0]["seconds"]), fmt(c[1]["seconds"]) if len(c) > 1 else "-",
                         fmt(u["warmup_s"]), "", "", "", "", "",
                         "/".join(fmt((x["allocator"] or {}).get("segment.all.allocated")) for x in c),
                         "/".join(fmt((x["allocator"] or {}).get("num_alloc_retries")) for x in c)])
        else:
            rows.append(["update", "default", u.get("skipped") or u.get("error", "?")] + [""] * (len(head) - 3))
    return head, rows


def print_table(out: dict) -> None:
    head, rows = table_rows(out)
    title = (f"warm-up at {out['shape']} on {out.get('device', '?')}: {out['rows']} rows x {out['tokens']} tokens; "
             f"'+' = first call minus second (s), first N = {out['first_steps']} decode steps")
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
        print(title)
        for r in [head, *rows]:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    else:
        t = Table(title=title)
        for h in head:
            t.add_column(h, justify="left" if h in ("decode", "allocator") else "right")
        for r in rows:
            t.add_row(*r)
        Console(width=200).print(t)
    share = {d: v for d, v in out["allocator_share_s"].items() if v is not None}
    if share:
        print("allocator share of the warm-up (default minus expandable_segments): "
              + ", ".join(f"{d} {v:.2f} s" for d, v in share.items()))
