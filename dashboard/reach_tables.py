"""The "compute to reach the same accuracy" tables (the reach blocks of GET /compare and GET
/compare/groups) and the rollout-allocation arena's leaderboard: API bodies in, rows and
DataFrames out. No Streamlit, no HTTP."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

import common.metric_keys as mk
from common.fmt import (MISSING, NOT_APPLICABLE, acc_text, half_ci, interval_text, metric_stat_text, number, p_text, pct,
                        per_seed_text, reach_cell, si, stat_text)
from dashboard.arena_chart import ArenaPoint
from dashboard.tables import BenchTable, best_cells, group_k, seeds_text, significance_of


# ---------------------------------------------------------------- compute to reach the same accuracy (the "reach" blocks)
# GET /compare/groups: reach.groups[i].targets[j] = {fraction, reached, of, step/flops/seconds: Stat,
# ratio: {flops, seconds}: RatioStat}; GET /compare: reach.runs[i].targets[j] with plain numbers.
# Both are shaped into the first form (one run = a group of one) so one table builder serves both.


# the reach blocks' costs (GET /compare*): (key, unit of the cell, name of its ratio line)
REACH_COSTS: tuple[tuple[str, str, str], ...] = (("flops", "FLOP", "FLOPs"), ("seconds", "s", "time"),
                                                 ("rollouts", "rollouts", "rollouts"), ("tokens", "tokens", "tokens"))


def _one(v: float | None) -> dict[str, Any]:
    """A single run's number as a Stat (no interval)."""
    return {"mean": v, "lo": None, "hi": None, "n": 0 if v is None else 1, "values": [] if v is None else [v]}


def run_reach_entries(reach: Mapping[str, Any], labels: Mapping[int, str], methods: Mapping[int, str]) -> list[dict[str, Any]]:
    """The per-run ``reach`` block of GET /compare as group-shaped entries (see above)."""
    out = []
    for r in reach.get("runs") or []:
        rid = r["run_id"]
        targets = [{"fraction": t["fraction"], "reached": int(bool(t["reached"])), "of": 1,
                    **{k: _one(t.get(k)) for k in ("step", *(c for c, _, _ in REACH_COSTS))},
                    "ratio": {c: _one((t.get("ratio") or {}).get(c)) for c, _, _ in REACH_COSTS}}
                   for t in r.get("targets") or []]
        out.append({"key": str(rid), "label": labels.get(rid, f"#{rid}"), "method": methods.get(rid, ""),
                    "baseline": rid == reach.get("baseline_run_id"), "reason": None, "targets": targets})
    return out


def group_reach_entries(reach: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The per-group ``reach`` block of GET /compare/groups, each entry flagged baseline or not."""
    return [{**g, "baseline": g["key"] == reach.get("baseline")} for g in reach.get("groups") or []]


def reach_target_accuracy(reach: Mapping[str, Any]) -> list[float | None]:
    """Each target's accuracy (a number per run, the mean over seeds per group)."""
    out = []
    for t in reach.get("targets") or []:
        acc = t.get("accuracy")
        out.append(acc.get("mean") if isinstance(acc, Mapping) else acc)
    return out


def reach_table(entries: Sequence[Mapping[str, Any]], reach: Mapping[str, Any], baseline_name: str, *,
                k: int | None = None, seeds: bool = True) -> BenchTable:
    """"Compute to reach <baseline>'s accuracy": rows = methods (groups or runs), one column per
    target (50/75/90/100% of the baseline's gain, with the target Avg@k), each cell from
    common.fmt's ``reach_cell`` (one short line each: a Plotly table does not wrap lines that are
    already broken). The least FLOPs to reach a target is bold. The frame has every number:
    reached / of, step, FLOPs, seconds, rollouts and tokens (mean, CI) and their ratios (mean,
    CI) per target."""
    fractions = [t["fraction"] for t in reach.get("targets") or []]
    accs = reach_target_accuracy(reach)
    kk = k or "k"
    columns = ["method"] + [f"{f:.0%} of {baseline_name}'s gain<br>(Avg@{kk} ≥ {a:.3f})" if a is not None else f"{f:.0%}"
                            for f, a in zip(fractions, accs)]
    flops = [[(t.get("flops") or {}).get("mean") if t["reached"] else None for t in e["targets"]] or [None] * len(fractions)
             for e in entries]
    best = [best_cells([row[j] if j < len(row) else None for row in flops], False, lambda v: si(v, "FLOP"))
            for j in range(len(fractions))]
    rows, bold, records = [], [], []
    for i, e in enumerate(entries):
        is_base = bool(e.get("baseline"))
        row = [e["label"] + (" (baseline)" if is_base else "")]
        if not e.get("targets"):
            row += [e.get("reason") or MISSING] + [MISSING] * (len(fractions) - 1)
        else:
            row += [reach_cell(t, is_base, seeds=seeds) for t in e["targets"]]
        rec: dict[str, Any] = {"key": e["key"], "label": e["label"], "method": e.get("method"), "baseline": is_base,
                               "reason": e.get("reason")}
        for t in e.get("targets") or []:
            col = f"{t['fraction']:.0%}"
            rec[f"{col}:reached"], rec[f"{col}:of"] = t["reached"], t["of"]
            for part in ("step", *(c for c, _, _ in REACH_COSTS)):
                stat = t.get(part) or {}
                rec[f"{col}:{part}"], rec[f"{col}:{part}_lo"], rec[f"{col}:{part}_hi"] = stat.get("mean"), stat.get("lo"), stat.get("hi")
            for cost, _, _ in REACH_COSTS:
                rs = (t.get("ratio") or {}).get(cost) or {}
                rec[f"{col}:ratio_{cost}"], rec[f"{col}:ratio_{cost}_lo"], rec[f"{col}:ratio_{cost}_hi"] = rs.get("mean"), rs.get("lo"), rs.get("hi")
        rows.append(row)
        bold.append([False] + [best[j][i] for j in range(len(fractions))])
        records.append(rec)
    return BenchTable(columns, rows, bold, pd.DataFrame(records), k)


# ---------------------------------------------------------------- the rollout-allocation arena (leaderboard)
ARENA_FRACTIONS = (0.5, 0.75, 0.9)


def seed_reach_text(t: Mapping[str, Any] | None) -> str:
    """One target of one group, per seed: 's0 1.2 GFLOP · 3.4 s · 2.1 k rollouts; s1 not reached'
    (every seed kept; rollouts where the run logged them)."""
    if not t or not t.get("seeds"):
        return MISSING
    parts: list[tuple[Any, str | None]] = []
    for s in t["seeds"]:
        cost = f"{si(s['flops'], 'FLOP')} · {si(s['seconds'], 's')}" if s.get("reached") and s.get("flops") is not None else None
        if cost is not None and s.get("rollouts") is not None:
            cost += f" · {si(s['rollouts'], '')} rollouts"
        parts.append((s.get("seed"), cost))
    return per_seed_text(parts, "<br>")


def _arena_test(body: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    return significance_of(body.get("significance") or {}, mk.OVERALL, key, "avg_at_k")


def arena_table(body: Mapping[str, Any]) -> BenchTable:
    """The arena's leaderboard from GET /compare/groups: one row per seed group (a method at one
    config), against the baseline group. Final Avg@k overall (last evaluation, mean ± half-CI
    across seeds), its difference to the baseline with the paired test's CI and p-value, FLOPs
    and seconds per step, rollouts generated and trained per step, the zero-accuracy ratio, then
    the share of FLOPs wasted (rows with no advantage signal), then per seed the FLOPs and seconds
    to reach 50/75/90% of the baseline's gain ('not reached' kept). Rows sorted by final Avg@k,
    best first; best of each column bold."""
    groups, base = body["groups"], body["baseline"]
    k = group_k(groups)
    reach = {g["key"]: g for g in (body.get("reach") or {}).get("groups") or []}
    cols = (("FLOPs / step", mk.FLOPS_TOTAL, "FLOP"), ("time / step", mk.STEP_S, "s"),
            ("rollouts gen / step", mk.ROLLOUTS_GENERATED, ""), ("rollouts trained / step", mk.ROLLOUTS_TRAINED, ""))
    final = [(g.get("evals") or {}).get(mk.OVERALL, {}).get("avg_at_k") for g in groups]
    order = sorted(range(len(groups)), key=lambda i: -((final[i] or {}).get("mean") or -1.0))
    columns = ["group", "seeds", f"final Avg@{k or 'k'}", "diff vs baseline (p)", *[c[0] for c in cols], "zero-acc ratio",
               "wasted FLOPs", *[f"to {f:.0%} of the baseline's gain (per seed)" for f in ARENA_FRACTIONS]]
    means = {c[1]: [((g.get("mean") or {}).get(c[1]) or {}).get("mean") for g in groups] for c in cols}
    zero = [((g.get("mean") or {}).get(mk.ZERO_ACC_AFTER_RESCUE) or {}).get("mean") for g in groups]
    waste = [((g.get("mean") or {}).get(mk.WASTE_FLOPS_FRAC) or {}).get("mean") for g in groups]
    best_waste = best_cells(waste, False, pct)
    best_final = best_cells([(f or {}).get("mean") for f in final], True, acc_text)
    best_cost = {c[1]: best_cells(means[c[1]], False, lambda v, u=c[2]: si(v, u)) for c in cols[:2]}
    rows, bold, records = [], [], []
    for i in order:
        g, is_base = groups[i], groups[i]["key"] == base
        test = None if is_base else _arena_test(body, g["key"])
        diff = NOT_APPLICABLE if is_base else (
            MISSING if not test else f"{number(test.get('diff'), '+.3f')} {interval_text(test.get('ci'))}<br>{p_text(test.get('p_value'))}")
        targets = {round(t["fraction"], 6): t for t in (reach.get(g["key"]) or {}).get("targets") or []}
        row = [g["label"] + (" (baseline)" if is_base else ""), seeds_text(g), stat_text(final[i]), diff,
               *[metric_stat_text(c[1], (g.get("mean") or {}).get(c[1])) for c in cols],
               metric_stat_text(mk.ZERO_ACC_AFTER_RESCUE, (g.get("mean") or {}).get(mk.ZERO_ACC_AFTER_RESCUE)),
               metric_stat_text(mk.WASTE_FLOPS_FRAC, (g.get("mean") or {}).get(mk.WASTE_FLOPS_FRAC)),
               *[seed_reach_text(targets.get(round(f, 6))) for f in ARENA_FRACTIONS]]
        rows.append(row)
        bold.append([False, False, best_final[i], False, *[best_cost[c[1]][i] if c[1] in best_cost else False for c in cols],
                     False, best_waste[i], *[False] * len(ARENA_FRACTIONS)])
        rec: dict[str, Any] = {"group": g["key"], "label": g["label"], "method": g["method"], "baseline": is_base,
                               "seeds": len(g.get("seeds") or g.get("run_ids") or []), "final_avg_at_k": (final[i] or {}).get("mean"),
                               "diff": (test or {}).get("diff"), "p_value": (test or {}).get("p_value"),
                               **{c[1]: means[c[1]][i] for c in cols}, mk.ZERO_ACC_AFTER_RESCUE: zero[i],
                               mk.WASTE_FLOPS_FRAC: waste[i]}
        for f in ARENA_FRACTIONS:
            for s in (targets.get(round(f, 6)) or {}).get("seeds") or []:
                rec[f"{f:.0%}:seed{s.get('seed')}:flops"] = s.get("flops") if s.get("reached") else None
                rec[f"{f:.0%}:seed{s.get('seed')}:seconds"] = s.get("seconds") if s.get("reached") else None
                rec[f"{f:.0%}:seed{s.get('seed')}:rollouts"] = s.get("rollouts") if s.get("reached") else None
        records.append(rec)
    return BenchTable(columns, rows, bold, pd.DataFrame(records), k)


def arena_points(body: Mapping[str, Any]) -> list[ArenaPoint]:
    """An ArenaPoint (dashboard/arena_chart.py) per seed group with both a final Avg@k and a
    FLOPs-per-step mean."""
    out = []
    for g in body["groups"]:
        acc = (g.get("evals") or {}).get(mk.OVERALL, {}).get("avg_at_k") or {}
        flops = (g.get("mean") or {}).get(mk.FLOPS_TOTAL) or {}
        if acc.get("mean") is not None and flops.get("mean") is not None:
            out.append(ArenaPoint(g["label"], g["method"], flops["mean"], half_ci(flops), acc["mean"], half_ci(acc)))
    return out
