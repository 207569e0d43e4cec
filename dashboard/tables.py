"""Pure data shaping for the pages: API bodies (plain dicts) in, rows / DataFrames / axis
values out. No Streamlit, no HTTP."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dashboard.charts import method_label, si

LATEST_KEYS: tuple[str, ...] = ("time/step_s", "reward/mean", "zero_acc/after_rescue")


# ---------------------------------------------------------------- runs


def run_label(run: Mapping[str, Any]) -> str:
    """'#3 aero-seed0 (AERO, running)'."""
    return f"#{run['id']} {run['name']} ({method_label(run['method'])}, {run['status']})"


def runs_frame(runs: Sequence[Mapping[str, Any]], latest: Mapping[int, Mapping[str, float | None]]) -> pd.DataFrame:
    """One row per run for the Runs page. ``latest[run_id]`` holds the last logged value of
    each :data:`LATEST_KEYS` key (missing = not logged yet)."""
    rows = []
    for r in runs:
        last = latest.get(r["id"], {})
        rows.append({
            "id": r["id"], "name": r["name"], "status": r["status"] + (" (cancelling)" if r.get("cancel_requested") and r["status"] == "running" else ""),
            "method": method_label(r["method"]), "progress": float(r.get("progress") or 0.0),
            "step": f"{r['current_step']}/{r['total_steps']}", "step time (s)": last.get("time/step_s"),
            "reward": last.get("reward/mean"), "zero-acc ratio": last.get("zero_acc/after_rescue"),
            "tags": ", ".join(r.get("tags") or []), "sweep": r.get("sweep_id"), "created": str(r.get("created_at", ""))[5:16].replace("T", " "),
            "message": last_line(r.get("error"))[:160],
            "open": f"./run?run={r['id']}",
        })
    return pd.DataFrame(rows, columns=["id", "open", "name", "status", "method", "progress", "step", "step time (s)", "reward",
                                       "zero-acc ratio", "tags", "sweep", "created", "message"])


def drop_empty(df: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Drop those of ``columns`` in which every cell is None, NaN or ''."""
    def blank(v: Any) -> bool:
        return v is None or v == "" or (isinstance(v, float) and math.isnan(v))

    return df.drop(columns=[c for c in columns if df[c].map(blank).all()])


def last_line(text: str | None) -> str:
    """The last non-blank line of an error text (a traceback's exception line)."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def last_values(payload: Mapping[str, Any]) -> dict[str, float | None]:
    """{key: last non-null value} of a metrics payload (``{steps, series}``)."""
    out: dict[str, float | None] = {}
    for key, vals in (payload.get("series") or {}).items():
        out[key] = next((v for v in reversed(vals) if v is not None), None)
    return out


def status_counts(runs: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(("queued", "running", "succeeded", "failed", "cancelled"), 0)
    for r in runs:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return counts


# ---------------------------------------------------------------- x axes for curves


def cumulative(steps: Sequence[int], values: Sequence[float | None]) -> list[float | None]:
    """Running total of a per-step quantity from (possibly decimated) points.

    Each kept point stands for the steps since the previous kept point, so the total at point i
    is sum_j<=i v_j * (s_j - s_{j-1}) with s_{-1} = s_0 - 1. Exact when no step was dropped;
    on a decimated series it assumes the value held over the dropped steps. Missing values count 0.
    """
    out: list[float | None] = []
    total, prev = 0.0, None
    for s, v in zip(steps, values):
        width = 1 if prev is None else s - prev
        total += (v or 0.0) * width
        out.append(total)
        prev = s
    return out


X_AXES: dict[str, str] = {"step": "step", "flops": "cumulative FLOPs", "time": "wall time (s)"}


def x_values(payload: Mapping[str, Any], axis: str) -> list[float | None]:
    """x values of a metrics payload for ``axis`` in :data:`X_AXES`. ``time`` uses the logged
    cumulative ``time/elapsed_s`` when present, else integrates ``time/step_s``; ``flops``
    integrates ``flops/total`` (see :func:`cumulative`)."""
    steps = list(payload["steps"])
    series = payload.get("series") or {}
    if axis == "step":
        return steps
    if axis == "time":
        elapsed = series.get("time/elapsed_s")
        if elapsed and any(v is not None for v in elapsed):
            return list(elapsed)
        return cumulative(steps, series.get("time/step_s") or [None] * len(steps))
    if axis == "flops":
        return cumulative(steps, series.get("flops/total") or [None] * len(steps))
    raise ValueError(f"unknown x axis {axis!r}")


def smooth(values: Sequence[float | None], window: int) -> list[float | None]:
    """Trailing moving average over the last ``window`` non-null points (1 = unchanged)."""
    if window <= 1:
        return list(values)
    out, buf = [], []
    for v in values:
        if v is not None:
            buf = (buf + [v])[-window:]
        out.append(sum(buf) / len(buf) if buf and v is not None else None)
    return out


# ---------------------------------------------------------------- evals


def latest_evals(evals: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """{benchmark: its eval row at the highest step} from /runs/{id}/evals rows."""
    out: dict[str, Mapping[str, Any]] = {}
    for e in evals:
        b = e["benchmark"]
        if b not in out or e["step"] >= out[b]["step"]:
            out[b] = e
    return out


def bench_order(names: Sequence[str]) -> list[str]:
    """Benchmarks sorted by name, with the pooled 'overall' last."""
    return sorted((n for n in set(names) if n != "overall")) + (["overall"] if "overall" in names else [])


def eval_frame(evals: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Run detail: the latest evaluation per benchmark with 95% CIs."""
    latest = latest_evals(evals)
    rows = []
    for b in bench_order(list(latest)):
        e = latest[b]
        rows.append({"benchmark": b, "step": e["step"], "n": e.get("n"), "k": e["k"],
                     "Avg@k": e.get("avg_at_k"), "Avg@k CI": ci_text(e.get("avg_ci")),
                     "Pass@k": e.get("pass_at_k"), "Pass@k CI": ci_text(e.get("pass_ci"))})
    return pd.DataFrame(rows, columns=["benchmark", "step", "n", "k", "Avg@k", "Avg@k CI", "Pass@k", "Pass@k CI"])


def ci_text(ci: Sequence[float | None] | None, digits: int = 3) -> str:
    if not ci or any(v is None for v in ci):
        return ""
    return f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


@dataclass
class BenchTable:
    """Paper Table 1 for the dashboard: display strings with best cells flagged, and numbers."""

    columns: list[str]
    rows: list[list[str]]
    bold: list[list[bool]]
    frame: pd.DataFrame = field(repr=False)
    k: int | None = None

    def part(self, prefixes: Sequence[str]) -> BenchTable:
        """The 'run' column plus the columns whose label starts with one of ``prefixes`` (a
        table with many benchmarks is shown as an Avg@k part and a Pass@k part)."""
        keep = [0] + [j for j, c in enumerate(self.columns) if j and c.startswith(tuple(prefixes))]
        return BenchTable([self.columns[j] for j in keep], [[r[j] for j in keep] for r in self.rows],
                          [[b[j] for j in keep] for b in self.bold], self.frame, self.k)


def _best(values: Sequence[float | None], higher: bool) -> list[bool]:
    present = [v for v in values if v is not None and not math.isnan(v)]
    if len(set(present)) < 2:  # nothing to single out (one run, or all equal)
        return [False] * len(values)
    target = max(present) if higher else min(present)
    return [v is not None and math.isclose(v, target, rel_tol=1e-9, abs_tol=1e-12) for v in values]


def _ratio(v: float | None, base: float | None) -> float | None:
    return None if v is None or base in (None, 0) else v / base


def benchmark_table(entries: Sequence[Mapping[str, Any]], baseline_id: int) -> BenchTable:
    """Rows = runs, columns = time and FLOPs per step, then Avg@k and Pass@k per benchmark and
    in total ('overall'), each with its 95% CI; best value of each column in bold (lowest cost,
    highest accuracy); cost and totals also as a ratio to the baseline run.

    ``entries``: {"run_id", "label", "method", "time_s", "flops", "evals": {benchmark: eval row}}.
    """
    benches = bench_order([b for e in entries for b in e["evals"]])
    base = next((e for e in entries if e["run_id"] == baseline_id), entries[0] if entries else None)
    ks = {ev["k"] for e in entries for ev in e["evals"].values() if ev.get("k")}
    k = ks.pop() if len(ks) == 1 else None
    kk = str(k) if k is not None else "k"
    columns = ["run", "time / step", "FLOPs / step"]
    num_cols: list[tuple[str, str, bool]] = [("time_s", "", False), ("flops", "", False)]  # (metric, bench, higher is better)
    for metric, name in (("avg_at_k", f"Avg@{kk}"), ("pass_at_k", f"Pass@{kk}")):
        for b in benches:
            columns.append(f"{name} {'total' if b == 'overall' else b}")
            num_cols.append((metric, b, True))

    def value(e: Mapping[str, Any], metric: str, bench: str) -> float | None:
        if not bench:
            return e.get(metric)
        return (e["evals"].get(bench) or {}).get(metric)

    numbers = [[value(e, m, b) for m, b, _ in num_cols] for e in entries]
    best_cols = [_best([row[j] for row in numbers], hi) for j, (_, _, hi) in enumerate(num_cols)]
    rows, bold, records = [], [], []
    for i, e in enumerate(entries):
        is_base = base is not None and e["run_id"] == base["run_id"]
        cells, flags = [e["label"] + (" (baseline)" if is_base else "")], [False]
        rec: dict[str, Any] = {"run_id": e["run_id"], "run": e["label"], "method": e["method"], "baseline": is_base}
        for j, (metric, bench, _) in enumerate(num_cols):
            v = numbers[i][j]
            r = _ratio(v, value(base, metric, bench)) if base is not None else None
            text = "–" if v is None else si(v, "s") if metric == "time_s" else si(v, "FLOP") if metric == "flops" else f"{v:.3f}"
            ci_key = "avg_ci" if metric == "avg_at_k" else "pass_ci"
            ci = (e["evals"].get(bench) or {}).get(ci_key) if bench else None
            if v is not None and (not bench or bench == "overall") and r is not None:
                text += f" ({r:.2f}×)"
            if ci and ci_text(ci):
                text += f"<br>{ci_text(ci, 2)}"  # 2 decimals: many benchmarks share the width
            cells.append(text)
            flags.append(best_cols[j][i])
            col = metric if not bench else f"{metric}:{bench}"
            rec[col] = v
            rec[f"{col}:ratio"] = r
            if bench and ci:
                rec[f"{col}:ci_lo"], rec[f"{col}:ci_hi"] = ci[0], ci[1]
        rows.append(cells)
        bold.append(flags)
        records.append(rec)
    return BenchTable(columns, rows, bold, pd.DataFrame(records), k)


# ---------------------------------------------------------------- sweeps


def sweep_ids(runs: Sequence[Mapping[str, Any]]) -> list[int]:
    """Distinct sweep ids of the given runs, newest (highest id) first."""
    return sorted({r["sweep_id"] for r in runs if r.get("sweep_id") is not None}, reverse=True)


def sweep_progress(sweep: Mapping[str, Any]) -> float:
    """Mean progress over the sweep's runs (a finished run counts as 1)."""
    runs = sweep.get("runs") or []
    if not runs:
        return 0.0
    done = {"succeeded", "failed", "cancelled"}
    return sum(1.0 if r["status"] in done else float(r.get("progress") or 0.0) for r in runs) / len(runs)
