"""Plain functions over stored step details (backend/db/rollouts.py): the columnar histogram
answer the heatmap reads."""

from __future__ import annotations

from typing import Any

from backend.services.downsample import downsample_indices


def histograms_body(run_id: int, rows: list[tuple[int, dict[str, Any]]], max_steps: int) -> dict[str, Any]:
    """{"run_id", "steps", "histograms": {name: {"lo", "hi", "bins", "counts": [[...] per step]}}}
    from (step, {name: {"lo", "hi", "counts"}}) rows. A step that lacks a histogram, or whose
    bins differ from the first step's, gets zero counts for it (bins are fixed per run)."""
    keep = downsample_indices(len(rows), 1, max_steps)
    rows = [rows[i] for i in keep]
    names = sorted({name for _, h in rows for name in h})
    out: dict[str, Any] = {}
    for name in names:
        first = next(h[name] for _, h in rows if name in h)
        bins = len(first["counts"])
        same = [h.get(name) if h.get(name) and len(h[name].get("counts", ())) == bins else None for _, h in rows]
        out[name] = {"lo": float(first["lo"]), "hi": float(first["hi"]), "bins": bins,
                     "counts": [[int(c) for c in h["counts"]] if h else [0] * bins for h in same]}
    return {"run_id": run_id, "steps": [s for s, _ in rows], "histograms": out}
