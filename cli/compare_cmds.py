"""``aero compare``: seed groups side by side in the terminal (a thin client of
GET /api/compare/groups; docs/comparisons.md explains how to read it), ending with the
"Compute to reach GRPO's accuracy" table. Every number reads as on the dashboard (common/fmt.py),
with how many seeds (or seed pairs) it stands on."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from cli.common import safe
from cli.consoles import out
from cli.rest_client import ApiOpt, TokenOpt, csv_items, call, client
import common.metric_keys as mk
from common.fmt import MISSING, interval_text, metric_stat_text, number, p_text, ratio_text, reach_cell, stat_text

# cli/main.py merges this into the `aero` app; this module never imports it.
commands = typer.Typer()

# (metric part, key, column title); each per-step mean in its unit (common.fmt.metric_stat_text)
COST_COLUMNS = (
    ("mean", mk.STEP_S, "s / step"),
    ("mean", mk.FLOPS_TOTAL, "FLOPs / step"),
    ("mean", mk.ROLLOUTS_TRAINED, "trained rollouts / step"),
    ("mean", mk.ZERO_ACC_AFTER_RESCUE, "zero-acc after rescue"),
    ("mean", mk.WASTE_FLOPS_FRAC, "wasted FLOPs"),
)


def runs_text(run_ids: list[int], seeds: list[Any]) -> str:
    """"#12, #15 (seeds 0, 1)": run ids marked as ids and seeds named, so neither reads as a count."""
    label = "seed" if len(seeds) == 1 else "seeds"
    return ", ".join(f"#{i}" for i in run_ids) + f" ({label} {', '.join('?' if s is None else str(s) for s in seeds)})"


def cost_table(cmp: Mapping[str, Any]) -> Table:
    t = Table(title=f"Cost per seed group (mean ± {100 * (1 - cmp['alpha']):.0f}% CI across seeds; ratio vs baseline: geometric mean over seed pairs)")
    t.add_column("group")
    t.add_column("runs")
    for _, _, title in COST_COLUMNS:
        t.add_column(title, justify="right")
    for g in cmp["groups"]:
        base = " [bold](baseline)[/]" if g["key"] == cmp["baseline"] else ""
        t.add_row(safe(g["label"]) + base, runs_text(g["run_ids"], g["seeds"]),
                  *[metric_stat_text(key, g[part].get(key), with_n=True) for part, key, _ in COST_COLUMNS])
        if g["key"] != cmp["baseline"]:
            t.add_row("  ratio", "", *[ratio_text(g["ratios"][part].get(key), with_n=True) for part, key, _ in COST_COLUMNS])
    return t


def bench_table(cmp: Mapping[str, Any], metric: str) -> Table:
    k = cmp.get("k") or "k"
    name = {"avg_at_k": f"Avg@{k}", "pass_at_k": f"Pass@{k}"}[metric]
    benches = sorted({b for g in cmp["groups"] for b in g["evals"]}, key=lambda b: (b == mk.OVERALL, b))
    t = Table(title=f"{name} per benchmark (mean ± CI across seeds; 'overall (p)' = paired permutation test vs baseline)")
    t.add_column("group")
    for b in benches:
        t.add_column("overall (p)" if b == mk.OVERALL else safe(b), justify="right")
    sig = {(row["group"], bench): row for bench, rows in cmp["significance"].items() for row in rows if row["metric"] == metric}
    for g in cmp["groups"]:
        cells = []
        for b in benches:
            text = stat_text(g["evals"].get(b, {}).get(metric), with_n=True)
            row = sig.get((g["key"], b))
            if row is not None and b == mk.OVERALL:
                text += f" ({p_text(row['p_value'])})"
            cells.append(text)
        t.add_row(safe(g["label"]), *cells)
    return t


def sig_table(cmp: Mapping[str, Any]) -> Table:
    labels = {g["key"]: safe(g["label"]) for g in cmp["groups"]}
    t = Table(title="Paired tests against the baseline, per benchmark")
    for col in ("benchmark", "group", "metric", "diff", "CI (problems + seeds)", "p", "problems", "seeds"):
        t.add_column(col, justify="left" if col in ("benchmark", "group", "metric") else "right")
    for bench, rows in sorted(cmp["significance"].items(), key=lambda kv: (kv[0] == mk.OVERALL, kv[0])):
        for r in rows:
            t.add_row(safe(bench), labels[r["group"]], f"{r['metric']}@{r['k']}", number(r["diff"], "+.4f"),
                      interval_text(r.get("ci"), "+.4f") or MISSING, p_text(r["p_value"]), str(r["problems"]),
                      "/".join(map(str, r["seeds"])))
    return t


def group_name(label: str, method: str) -> str:
    """'GRPO' for a plain GRPO group, else the group's label (the baseline in the reach title)."""
    from trainer.methods.spec import get_method, method_names

    if label != method:
        return label
    return get_method(method).display.label if method in method_names() else method


def reach_table(cmp: Mapping[str, Any]) -> Table | str:
    """"Compute to reach <baseline>'s accuracy" (the ``reach`` block of /compare/groups): rows =
    groups, one column per target fraction of the baseline's gain, each cell common.fmt's
    ``reach_cell`` (costs, ratios with their seed pairs, seeds that did not reach it); or a
    sentence saying why there are no targets."""
    reach = cmp.get("reach") or {}
    base = next((g for g in cmp["groups"] if g["key"] == cmp["baseline"]), cmp["groups"][0])
    name = safe(group_name(base["label"], base["method"]))
    if reach.get("reason") or not reach.get("targets"):
        return f"Compute to reach {name}'s accuracy: no targets ({safe(reach.get('reason') or 'no evaluations')})."
    k = cmp.get("k") or "k"
    t = Table(title=f"Compute to reach {name}'s accuracy (held-out Avg@{k} overall, smoothed over {reach['window']} evals; "
                    f"training FLOPs and seconds, mean ± {100 * (1 - cmp['alpha']):.0f}% CI over the seeds that reached; "
                    "ratio to the baseline per seed pair)")
    t.add_column("group")
    for tg in reach["targets"]:
        t.add_column(f"{tg['fraction']:.0%} of {name}'s gain\n(Avg@{k} ≥ {tg['accuracy']['mean']:.3f})", justify="right")
    for g in reach["groups"]:
        is_base = g["key"] == reach["baseline"]
        label = safe(g["label"]) + (" [bold](baseline)[/]" if is_base else "")
        if not g["targets"]:
            t.add_row(label, safe(g.get("reason") or MISSING), *[MISSING] * (len(reach["targets"]) - 1))
            continue
        t.add_row(label, *[reach_cell(tg, is_base, with_n=True, sep="\n") for tg in g["targets"]])
    return t


@commands.command("compare")
def compare_cmd(
    sweep: Annotated[Optional[int], typer.Option("--sweep", help="Compare every run of this sweep.")] = None,
    runs: Annotated[Optional[str], typer.Option("--runs", help="Run ids, comma-separated (grouped by config without seed).")] = None,
    group: Annotated[Optional[list[str]], typer.Option("--group", help="An explicit seed group: run ids, comma-separated; repeatable.")] = None,
    baseline: Annotated[Optional[int], typer.Option(help="A run id whose group is the baseline (default: the first GRPO group).")] = None,
    alpha: Annotated[float, typer.Option(help="1 - confidence level of the intervals.")] = 0.05,
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON instead of tables.")] = False,
    api: ApiOpt = None,
    token: TokenOpt = None,
):
    """Seed groups side by side, with confidence intervals across seeds and paired p-values.

    Cost with CIs and ratios per seed pair, benchmark accuracy with paired p-values, and the
    compute each group needs to reach the baseline's accuracy (see docs/comparisons.md)."""
    params: dict[str, Any] = {"alpha": alpha}
    with client(api, token, timeout=120.0) as c:
        ids = csv_items(runs)
        if sweep is not None:
            ids += [str(r["id"]) for r in call(c, "GET", f"/sweeps/{sweep}")["runs"]]
        if ids:
            params["run_ids"] = ",".join(dict.fromkeys(ids))
        if group:
            params["groups"] = group
        if baseline is not None:
            params["baseline"] = baseline
        if "run_ids" not in params and not group:
            raise typer.BadParameter("give --sweep, --runs or --group", param_hint="--sweep")
        cmp = call(c, "GET", "/compare/groups", params=params)
    if as_json:
        out.print_json(json.dumps(cmp))
        return
    out.print(cost_table(cmp))
    for metric in mk.EVAL_METRICS:
        if any(g["evals"] for g in cmp["groups"]):
            out.print(bench_table(cmp, metric))
    if cmp["significance"]:
        out.print(sig_table(cmp))
    if "reach" in cmp:
        out.print(reach_table(cmp))
