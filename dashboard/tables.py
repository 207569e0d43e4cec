"""Pure data shaping for the pages: API bodies (plain dicts) in, rows / DataFrames / axis
values out. No Streamlit, no HTTP."""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

import common.metric_keys as mk
from common.run_state import WAITING, state_of, waited_text
from common.fmt import MISSING, NOT_APPLICABLE, acc_text, interval_text, metric_stat_text, p_text, pct, ratio_text, si, stat_text
from dashboard.method_style import MethodStyle

LATEST_KEYS: tuple[str, ...] = (mk.STEP_S, mk.REWARD_MEAN, mk.ZERO_ACC_AFTER_RESCUE)


# ---------------------------------------------------------------- runs


def staleness_tag(config: Mapping[str, Any] | None) -> str:
    """'k=2' for an asynchronous run (``offpolicy.max_staleness`` = 2), '' for a synchronous one
    (0, or a config stored before the field existed): what tells runs of one method apart when
    a comparison spans staleness."""
    k = ((config or {}).get("offpolicy") or {}).get("max_staleness") or 0
    return f"k={k}" if k > 0 else ""


def run_label(run: Mapping[str, Any], style: MethodStyle) -> str:
    """'#3 aero-seed0 (AERO, running)'; 'waiting' for a run that waits for its GPUs; an
    asynchronous run's staleness after its method ('AERO, k=2')."""
    k = staleness_tag(run.get("config"))
    return f"#{run['id']} {run['name']} ({style.label(run['method'])}{', ' + k if k else ''}, {state_of(run)})"


def status_text(run: Mapping[str, Any]) -> str:
    """A run's status cell: its state (common/run_state.py), 'waiting · 3m 12s' for a run that
    waits for its GPUs, '(cancelling)' after a running run's cancel request."""
    waited = waited_text(run)
    text = state_of(run) + (f" · {waited}" if waited else "")
    return text + (" (cancelling)" if run.get("cancel_requested") and run["status"] == "running" else "")


STEP_TIME_MEAN = "time/step_s:mean"  # run_summary's key for the mean step time


def progress_svg(fraction: float, color: str) -> str:
    """A run's progress bar in ``color`` (its method's) with its percentage, as an SVG data URL
    for an image column: Streamlit's ProgressColumn paints every row in one colour (the theme's
    red), and on the Runs page a bar should say which method is training like every chart does."""
    f = min(1.0, max(0.0, float(fraction or 0.0)))
    # 27 px tall: the grid scales an image to its row's height, so the text stays 13 px
    svg = ("<svg xmlns='http://www.w3.org/2000/svg' width='130' height='27' viewBox='0 0 130 27'>"
           "<rect x='0' y='9.5' width='80' height='8' rx='4' fill='#E6E9EF'/>"
           f"<rect x='0' y='9.5' width='{80 * f:.1f}' height='8' rx='4' fill='{color}'/>"
           f"<text x='86' y='18' font-family='sans-serif' font-size='13' fill='#31333F'>{pct(f)}</text></svg>")
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()


def runs_frame(runs: Sequence[Mapping[str, Any]], latest: Mapping[int, Mapping[str, float | None]],
               style: MethodStyle) -> pd.DataFrame:
    """One row per run for the Runs page. ``latest[run_id]`` is the run's :func:`run_summary`
    (missing = nothing logged yet): the mean step time over its steps, and the last reward and
    zero-accuracy ratio. The progress is a bar in the method's colour (:func:`progress_svg`);
    the zero-accuracy ratio is in percent (shown as 12.5%, like every percentage here). A running
    run that waits for its GPUs reads 'waiting' and for how long (:func:`status_text`), and its
    ``waits for`` cell says for what."""
    rows = []
    for r in runs:
        last = latest.get(r["id"], {})
        zero = last.get(mk.ZERO_ACC_AFTER_RESCUE)
        rows.append({
            "id": r["id"], "name": r["name"], "status": status_text(r),
            "waits for": (r.get("waiting_for") or "") if state_of(r) == WAITING else "",
            "method": style.label(r["method"]), "progress": progress_svg(r.get("progress") or 0.0, style.color(r["method"])),
            "step": f"{r['current_step']}/{r['total_steps']}", "mean step time (s)": last.get(STEP_TIME_MEAN),
            "reward": last.get(mk.REWARD_MEAN), "zero-acc ratio": None if zero is None else 100 * zero,
            "owner": r.get("owner") or "",
            "tags": ", ".join(r.get("tags") or []), "sweep": r.get("sweep_id"), "created": str(r.get("created_at", ""))[5:16].replace("T", " "),
            "message": last_line(r.get("error"))[:160],
            "open": f"./run?run={r['id']}",
        })
    return pd.DataFrame(rows, columns=["id", "open", "name", "status", "waits for", "method", "progress", "step", "mean step time (s)",
                                       "reward", "zero-acc ratio", "owner", "tags", "sweep", "created", "message"])


def latest_runs(runs: Sequence[Mapping[str, Any]], n: int = 5, max_running: int = 10) -> list[Mapping[str, Any]]:
    """The Overview's "Latest runs": running runs first (newest first), then the newest others,
    ``n`` in all, or more when more are running (up to ``max_running``). A sweep queues its runs
    after the one training, so "the newest five" would hide the one run that is doing anything."""
    running = [r for r in runs if r["status"] == "running"][:max_running]
    others = [r for r in runs if r["status"] != "running"]
    return running + others[:max(0, n - len(running))]


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


def mean_of(values: Sequence[float | None] | None) -> float | None:
    """Mean of the non-null values, None when there are none."""
    vals = [v for v in values or () if v is not None]
    return sum(vals) / len(vals) if vals else None


def run_summary(payload: Mapping[str, Any]) -> dict[str, float | None]:
    """A run's row values from its metrics payload: the last value of every key, and under
    :data:`STEP_TIME_MEAN` the mean seconds per step over its steps: methods are compared by
    what a step costs on average, and the last step alone (or the first, which warms caches)
    says little. On a long run the API's evenly spaced points stand in for every step."""
    return {**last_values(payload), STEP_TIME_MEAN: mean_of((payload.get("series") or {}).get(mk.STEP_S))}


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
        elapsed = series.get(mk.ELAPSED_S)
        if elapsed and any(v is not None for v in elapsed):
            return list(elapsed)
        return cumulative(steps, series.get(mk.STEP_S) or [None] * len(steps))
    if axis == "flops":
        return cumulative(steps, series.get(mk.FLOPS_TOTAL) or [None] * len(steps))
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
    return sorted((n for n in set(names) if n != mk.OVERALL)) + ([mk.OVERALL] if mk.OVERALL in names else [])


def eval_frame(evals: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Run detail: the latest evaluation per benchmark with 95% CIs."""
    latest = latest_evals(evals)
    rows = []
    for b in bench_order(list(latest)):
        e = latest[b]
        rows.append({"benchmark": b, "step": e["step"], "n": e.get("n"), "k": e["k"],
                     "Avg@k": e.get("avg_at_k"), "Avg@k CI": interval_text(e.get("avg_ci")),
                     "Pass@k": e.get("pass_at_k"), "Pass@k CI": interval_text(e.get("pass_ci"))})
    return pd.DataFrame(rows, columns=["benchmark", "step", "n", "k", "Avg@k", "Avg@k CI", "Pass@k", "Pass@k CI"])


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


def best_cells(values: Sequence[float | None], higher: bool, shown: Callable[[float], str] | None = None) -> list[bool]:
    """Which cells of a column are bold: every value that ties the best one (lowest cost,
    highest accuracy), one rule in every column and table. A tie is judged on the value as the
    cell shows it (``shown``, e.g. 3 decimals): two cells that both read 0.500 are both bold,
    and a column where every run reads the same is bold throughout (all tied best). A column
    with fewer than two values has nothing to compare: no bold."""
    present = [v for v in values if v is not None and not math.isnan(v)]
    if len(present) < 2:
        return [False] * len(values)
    target = max(present) if higher else min(present)
    if shown is not None:
        return [v is not None and not math.isnan(v) and shown(v) == shown(target) for v in values]
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
    shown = {"time_s": lambda v: si(v, "s"), "flops": lambda v: si(v, "FLOP")}
    best_cols = [best_cells([row[j] for row in numbers], hi, shown.get(m, acc_text)) for j, (m, _, hi) in enumerate(num_cols)]
    rows, bold, records = [], [], []
    for i, e in enumerate(entries):
        is_base = base is not None and e["run_id"] == base["run_id"]
        cells, flags = [e["label"] + (" (baseline)" if is_base else "")], [False]
        rec: dict[str, Any] = {"run_id": e["run_id"], "run": e["label"], "method": e["method"], "baseline": is_base}
        for j, (metric, bench, _) in enumerate(num_cols):
            v = numbers[i][j]
            r = _ratio(v, value(base, metric, bench)) if base is not None else None
            text = MISSING if v is None else shown.get(metric, acc_text)(v)
            ci_key = "avg_ci" if metric == "avg_at_k" else "pass_ci"
            ci = (e["evals"].get(bench) or {}).get(ci_key) if bench else None
            if v is not None and (not bench or bench == mk.OVERALL) and r is not None:
                text += f" ({ratio_text(r)})"
            if interval_text(ci):
                text += f"<br>{interval_text(ci, '.2f')}"  # 2 decimals: many benchmarks share the width
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


# ---------------------------------------------------------------- seed groups (GET /compare/groups)
# Stat = {"mean", "lo", "hi", "n", "values"}: Student-t CI across a group's seeds (lo/hi None when n < 2).
# RatioStat = {"mean", "lo", "hi", "n", "pairs"}: group / baseline, paired by seed.


def seeds_text(group: Mapping[str, Any]) -> str:
    """'3 (0, 1, 2)': how many seeds and which."""
    seeds = group.get("seeds") or []
    return f"{len(seeds)} ({', '.join(str(s) for s in seeds)})" if seeds else str(len(group.get("run_ids") or []))


# (column, section, key, higher is better); section "mean" = per-step means (in their units,
# common.fmt.metric_stat_text), "evals" = overall evals (common.fmt.stat_text)
SUMMARY_COLUMNS: tuple[tuple[str, str, str, bool], ...] = (
    ("time / step", "mean", mk.STEP_S, False),
    ("FLOPs / step", "mean", mk.FLOPS_TOTAL, False),
    # the share of a step's FLOPs whose rows carried no advantage signal (docs/metrics.md "Wasted compute")
    ("wasted FLOPs", "mean", mk.WASTE_FLOPS_FRAC, False),
    ("trained rollouts / step", "mean", mk.ROLLOUTS_TRAINED, False),
    ("zero-acc after rescue", "mean", mk.ZERO_ACC_AFTER_RESCUE, False),
    ("Avg@k total", "evals", "avg_at_k", True),
    ("Pass@k total", "evals", "pass_at_k", True),
)


def summary_text(section: str, key: str, stat: Mapping[str, Any] | None) -> str:
    """One cell of the group summary: a per-step mean in its unit, an accuracy with 3 decimals."""
    return metric_stat_text(key, stat) if section == "mean" else stat_text(stat)


def group_k(groups: Sequence[Mapping[str, Any]]) -> int | None:
    """The evaluations' k when every group shares one, else None."""
    ks = {ev.get("k") for g in groups for ev in (g.get("evals") or {}).values() if ev.get("k")}
    return ks.pop() if len(ks) == 1 else None


def _group_stat(g: Mapping[str, Any], section: str, key: str) -> tuple[Mapping | None, Mapping | None]:
    """(Stat, RatioStat) of one summary cell."""
    ratios = g.get("ratios") or {}
    if section == "evals":
        return (g.get("evals") or {}).get(mk.OVERALL, {}).get(key), ((ratios.get("evals") or {}).get(mk.OVERALL) or {}).get(key)
    return (g.get("mean") or {}).get(key), (ratios.get("mean") or {}).get(key)


def _stat_record(rec: dict[str, Any], col: str, stat: Mapping | None, rs: Mapping | None) -> None:
    """Numbers behind one cell, for the CSV."""
    stat, rs = stat or {}, rs or {}
    for part in ("mean", "lo", "hi", "n"):
        rec[f"{col}:{part}"] = stat.get(part)
    for part in ("mean", "lo", "hi", "n"):
        rec[f"{col}:ratio_{part}"] = rs.get(part)


def group_summary_table(groups: Sequence[Mapping[str, Any]], baseline_key: str) -> BenchTable:
    """One row per seed group: seeds, then cost (time, FLOPs, trained rollouts per step),
    zero-accuracy after rescue, Avg@k and Pass@k over all benchmarks, each as 'mean ± half-CI'
    (95% Student-t across seeds) with the ratio to the baseline group below ('0.52× [0.48,
    0.56]': geometric mean and CI of the per-seed-pair ratios), and how many seed pairs those ratios
    use. Best mean of each column in bold (lowest cost and zero-accuracy, highest accuracy)."""
    k = group_k(groups)
    has_evals = any((g.get("evals") or {}).get(mk.OVERALL) for g in groups)
    cols = [c for c in SUMMARY_COLUMNS if c[1] == "mean" or has_evals]
    columns = ["group", "seeds"] + [c[0].replace("@k", f"@{k}") if k else c[0] for c in cols] + ["seed pairs"]
    cells = [[_group_stat(g, sec, key) for _, sec, key, _ in cols] for g in groups]
    # ties on the mean as the cell shows it (the format of a Stat without its interval)
    best = [best_cells([row[j][0].get("mean") if row[j][0] else None for row in cells], hi,
                       lambda v, sec=sec, key=key: summary_text(sec, key, {"mean": v}))
            for j, (_, sec, key, hi) in enumerate(cols)]
    rows, bold, records = [], [], []
    for i, g in enumerate(groups):
        is_base = g["key"] == baseline_key
        row = [g["label"] + (" (baseline)" if is_base else ""), seeds_text(g)]
        rec: dict[str, Any] = {"group": g["key"], "label": g["label"], "method": g["method"], "baseline": is_base,
                               "run_ids": " ".join(map(str, g.get("run_ids") or [])), "seeds": len(g.get("seeds") or g.get("run_ids") or [])}
        pairs = []
        for (name, sec, key, _), (stat, rs) in zip(cols, cells[i]):
            text = summary_text(sec, key, stat)
            if not is_base and stat and stat.get("mean") is not None:
                text += f"<br>{ratio_text(rs)}"
                pairs.append((rs or {}).get("n") or 0)
            row.append(text)
            _stat_record(rec, name, stat, None if is_base else rs)
        row.append(NOT_APPLICABLE if is_base else str(max(pairs, default=0)))
        rec["seed pairs"] = None if is_base else max(pairs, default=0)
        rows.append(row)
        bold.append([False, False] + [best[j][i] for j in range(len(cols))] + [False])
        records.append(rec)
    return BenchTable(columns, rows, bold, pd.DataFrame(records), k)


def significance_of(significance: Mapping[str, Any], bench: str, group_key: str, metric: str) -> Mapping[str, Any] | None:
    """The test of ``group_key`` against the baseline on ``bench`` for ``metric``, if the API ran one."""
    return next((t for t in significance.get(bench) or [] if t.get("group") == group_key and t.get("metric") == metric), None)


def group_benchmark_table(groups: Sequence[Mapping[str, Any]], significance: Mapping[str, Any], baseline_key: str,
                          metric: str = "avg_at_k") -> BenchTable:
    """Paper Table 1 for seed groups: per benchmark the ``metric`` (Avg@k or Pass@k) averaged
    over the group's seeds, then 'Total (P-value)': the pooled ('overall') value and the p-value
    of the paired permutation test of the group against the baseline (seeds averaged per
    problem), e.g. '0.480 (p=0.012)'; the baseline shows '—' there. Best of each column bold."""
    k = group_k(groups)
    name = ("Avg" if metric == "avg_at_k" else "Pass") + f"@{k or 'k'}"
    benches = [b for b in bench_order([b for g in groups for b in g.get("evals") or {}]) if b != mk.OVERALL]
    has_total = any(mk.OVERALL in (g.get("evals") or {}) for g in groups)
    keys = benches + ([mk.OVERALL] if has_total else [])
    columns = ["group"] + [f"{name} {b}" for b in benches] + ([f"{name} Total (P-value)"] if has_total else [])
    stats = [[((g.get("evals") or {}).get(b) or {}).get(metric) or {} for b in keys] for g in groups]
    best = [best_cells([row[j].get("mean") for row in stats], True, acc_text) for j in range(len(keys))]
    rows, bold, records = [], [], []
    for i, g in enumerate(groups):
        is_base = g["key"] == baseline_key
        row = [g["label"] + (" (baseline)" if is_base else "")]
        rec: dict[str, Any] = {"group": g["key"], "label": g["label"], "method": g["method"], "baseline": is_base,
                               "seeds": len(g.get("seeds") or g.get("run_ids") or [])}
        for b, stat in zip(keys, stats[i]):
            mean = stat.get("mean")
            text = acc_text(mean)
            rec[f"{metric}:{b}"], rec[f"{metric}:{b}:lo"], rec[f"{metric}:{b}:hi"] = mean, stat.get("lo"), stat.get("hi")
            if b == mk.OVERALL:
                test = None if is_base else significance_of(significance, mk.OVERALL, g["key"], metric)
                if is_base:
                    text += f" ({NOT_APPLICABLE})"
                elif test is not None:
                    text += f" ({p_text(test.get('p_value'))})"
                test = test or {}
                rec[f"{metric}:diff"], rec[f"{metric}:p_value"] = test.get("diff"), test.get("p_value")
                rec[f"{metric}:diff_lo"], rec[f"{metric}:diff_hi"] = (test.get("ci") or [None, None])[:2]
                rec[f"{metric}:problems"] = test.get("problems")
            row.append(text)
        rows.append(row)
        bold.append([False] + [best[j][i] for j in range(len(keys))])
        records.append(rec)
    return BenchTable(columns, rows, bold, pd.DataFrame(records), k)
