"""Render an `aero bench` report as Markdown tables (printed by the CLI, pasted in BENCHMARKS.md).

Every statistic reads as on the dashboard and in ``aero compare`` (common/fmt.py): mean ± half the
CI, ratios as '0.52× [0.48, 0.56]', p-values as 'p=0.012' / 'p<0.001', a missing value as '–';
the columns keep their own units (seconds, GFLOPs) and precision."""

from __future__ import annotations

from typing import Any

import common.metric_keys as mk
from common.fmt import MISSING, NOT_APPLICABLE, NOT_REACHED, acc_text, number, p_text, per_seed_text, ratio_text, stat_text

COLUMNS = [  # (header, field, format spec); FLOPs in GFLOPs
    ("step s", "step_s", ".3f"), ("rollout s", "rollout_s", ".3f"), ("train s", "train_s", ".3f"),
    ("rollouts gen", "rollouts_generated", ".1f"), ("rollouts trained", "rollouts_trained", ".1f"),
    ("tokens gen", "tokens_generated", ".0f"), ("tokens trained", "tokens_trained", ".0f"),
    ("GFLOPs rollout", "flops_rollout", ".2f"), ("GFLOPs train", "flops_train", ".2f"),
    ("GFLOPs total", "flops_total", ".2f"), ("zero-acc explore", "zero_acc_after_explore", ".3f"),
    ("zero-acc rescue", "zero_acc_after_rescue", ".3f"),
]


def _cell(spec: str, field: str, value: float | None) -> str:
    return number(value, spec, scale=1e9 if field.startswith("flops") else 1.0)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_markdown(report: dict[str, Any]) -> str:
    methods, k = report["methods"], report["meta"]["eval"]["k"]
    head = ["method", *[c[0] for c in COLUMNS], f"Avg@{k}", f"Pass@{k}"]
    lines = [f"Per-step means over {report['meta']['steps']} steps (seed {report['meta']['seed']}, "
             f"{report['meta']['machine']}); final eval overall.", "", _row(head), _row(["---"] * len(head))]
    for name, m in methods.items():
        ov = m["eval"].get(mk.OVERALL, {})
        lines.append(_row([name, *[_cell(f, fld, m[fld]) for _, fld, f in COLUMNS],
                           acc_text(ov.get("avg_at_k")), acc_text(ov.get("pass_at_k"))]))
    for pair, r in report["ratios"].items():
        lines.append(_row([f"**{pair}**", *[ratio_text(r[fld], 3) if fld in r else "" for _, fld, _ in COLUMNS],
                           ratio_text(r.get("final_avg_at_k"), 3), ratio_text(r.get("final_pass_at_k"), 3)]))
    benches = [b for b in report["base_eval"] if b != mk.OVERALL] + [mk.OVERALL]
    lines += ["", f"Final Avg@{k} / Pass@{k} per benchmark (base = the checkpoint every method starts from).", "",
              _row(["method", *benches]), _row(["---"] * (len(benches) + 1))]
    rows = [("base", report["base_eval"])] + [(n, m["eval"]) for n, m in methods.items()]
    for name, ev in rows:
        lines.append(_row([name, *[f"{acc_text(ev[b]['avg_at_k'])} / {acc_text(ev[b]['pass_at_k'])}" if b in ev else ""
                                   for b in benches]]))
    return "\n".join(lines)


# --- several seeds (`aero bench --seeds`) ----------------------------------------------------
SEED_COLUMNS = [  # (header, field, format spec, scale)
    ("step s", "step_s", ".3f", 1), ("rollout s", "rollout_s", ".3f", 1), ("train s", "train_s", ".3f", 1),
    ("rollouts trained", "rollouts_trained", ".0f", 1), ("GFLOPs total", "flops_total", ".2f", 1e9),
    ("zero-acc explore", "zero_acc_after_explore", ".3f", 1), ("zero-acc rescue", "zero_acc_after_rescue", ".3f", 1),
]


def render_seeds_markdown(report: dict[str, Any]) -> str:
    meta, summ = report["meta"], report["summary"]
    k, seeds = meta["eval"]["k"], meta["seeds"]
    head = ["method", *[c[0] for c in SEED_COLUMNS], f"final Avg@{k}", "gain over base"]
    lines = [f"{len(seeds)} seeds ({', '.join(map(str, seeds))}), {meta['steps']} steps, base: {meta['base']}; "
             f"mean ± 95% t half-width across seeds; final = mean of the last 3 evals (overall); {meta['machine']}.",
             "", _row(head), _row(["---"] * len(head))]
    for name, m in summ["methods"].items():
        lines.append(_row([name, *[stat_text(m[f], spec, scale=scale) for _, f, spec, scale in SEED_COLUMNS],
                           stat_text(m["final_avg_at_k"].get(mk.OVERALL)), stat_text(m["gain"].get(mk.OVERALL), sign=True)]))
    for pair, r in summ["ratios"].items():
        lines.append(_row([f"**{pair}**", *[ratio_text(r[f]) for _, f, _, _ in SEED_COLUMNS], "",
                           f"diff {stat_text(r['final_diff'], sign=True)}"]))
    benches = list(summ["base_eval"])
    lines += ["", f"Final Avg@{k} (mean of the last 3 evals) minus the base, per benchmark (base row: the base's Avg@{k}).",
              "", _row(["method", *benches]), _row(["---"] * (len(benches) + 1)),
              _row(["base", *[stat_text(summ["base_eval"][b]) for b in benches]])]
    for name, m in summ["methods"].items():
        lines.append(_row([name, *[stat_text(m["gain"][b], sign=True) for b in benches]]))
    if "reach" in summ:
        lines += ["", render_reach(summ["reach"], k)]
    if summ.get("leaderboard"):
        base = next((r["method"] for r in summ["leaderboard"] if r["baseline"]), None)
        lines += ["", render_leaderboard(summ["leaderboard"], k, base)]
    return "\n".join(lines)


def render_reach(r: dict[str, Any], k: int) -> str:
    """Compute to reach fractions of GRPO's gain: per method, reached seeds, GFLOPs, seconds and
    rollouts generated (mean ± CI over the seeds that reached) and the ratios to GRPO paired by seed."""
    if not r.get("fractions"):
        return f"Compute to reach GRPO's accuracy: not computed ({r.get('reason', 'no data')})."
    head = ["method", "target (of GRPO's gain)", "reached", "GFLOPs", "seconds", "rollouts", "FLOPs / GRPO's",
            "seconds / GRPO's", "rollouts / GRPO's", "per-seed FLOPs ratios"]
    lines = [f"Compute to reach GRPO's Avg@{k} gain (base {stat_text(r['base'])}, GRPO final {stat_text(r['final'])}; curves "
             "smoothed over 3 evals; training compute only):", "", _row(head), _row(["---"] * len(head))]
    for name, rows in r["runs"].items():
        for row, ratio in zip(rows, r["ratios"][name]):
            per_seed = ", ".join(NOT_REACHED if v is None else ratio_text(v) for v in ratio["flops"]["ratios"])
            lines.append(_row([name, f"{row['fraction']:.0%}", f"{row['reached']}/{row['of']}",
                               stat_text(row["flops"], ".0f", scale=1e9), stat_text(row["seconds"], ".1f"),
                               stat_text(row.get("rollouts"), ".0f"), ratio_text(ratio["flops"]), ratio_text(ratio["seconds"]),
                               ratio_text(ratio.get("rollouts")), per_seed]))
    return "\n".join(lines)


def _p(test: dict[str, Any] | None) -> str:
    return MISSING if not test else p_text(test["p_value"])


def _reach_cell(row: dict[str, Any], cost: str, spec: str, scale: float) -> str:
    """How many seeds reached the target, then per seed the cost to reach it (or 'not reached')."""
    per_seed = per_seed_text((s["seed"], None if s.get(cost) is None else number(s[cost], spec, scale=scale)) for s in row["seeds"])
    return f"{row['reached']}/{row['of']}: {per_seed}"


def render_leaderboard(rows: list[dict[str, Any]], k: int, baseline: str | None) -> str:
    """The arena's leaderboard (trainer/bench/arena.py) as Markdown: accuracy and p-value, costs
    per step and the share of FLOPs that trained nothing (``waste/flops_frac``), then the compute
    to reach 50/75/90% of the baseline's gain per seed: FLOPs, seconds, rollouts and tokens generated."""
    if not rows:
        return ""
    base = baseline or "the baseline"
    head = ["method", f"final Avg@{k}", f"diff vs {base}", "p", "GFLOPs / step", "s / step", "rollouts gen / step",
            "rollouts trained / step", "zero-acc ratio", "wasted FLOPs"]
    lines = [f"Leaderboard (equal rollout budget n_total per prompt; mean ± 95% t half-width across seeds; p: paired "
             f"sign-flip permutation over problems of the last evaluation against {base}):", "",
             _row(head), _row(["---"] * len(head))]
    for r in rows:
        lines.append(_row([f"**{r['method']}**" if r["baseline"] else r["method"], stat_text(r["final"]),
                           NOT_APPLICABLE if r["baseline"] else stat_text(r["diff"], sign=True),
                           NOT_APPLICABLE if r["baseline"] else _p(r["test"]),
                           stat_text(r["flops_total"], ".2f", scale=1e9), stat_text(r["step_s"], ".3f"),
                           stat_text(r["rollouts_generated"], ".1f"), stat_text(r["rollouts_trained"], ".1f"),
                           stat_text(r["zero_acc_after_rescue"]), stat_text(r.get("waste_flops_frac"))]))
    head = ["method", "target (of the gain)", "GFLOPs to reach, per seed", "seconds to reach, per seed",
            "rollouts to reach, per seed", "k tokens to reach, per seed"]
    lines += ["", f"Compute to reach {base}'s gain, per seed (training compute only; 'not reached' kept):", "",
              _row(head), _row(["---"] * len(head))]
    for r in rows:
        for t in r["reach"]:
            lines.append(_row([r["method"], f"{t['fraction']:.0%}", _reach_cell(t, "flops", ".0f", 1e9),
                               _reach_cell(t, "seconds", ".1f", 1.0), _reach_cell(t, "rollouts", ".0f", 1.0),
                               _reach_cell(t, "tokens", ".0f", 1e3)]))
    return "\n".join(lines)


# --- a shape (`aero bench --shape`) -----------------------------------------------------------
SHAPE_COLUMNS = [  # (header, field, format spec, scale)
    ("step s", "step_s", ".2f", 1), ("generate s", "rollout_s", ".2f", 1), ("update s", "train_s", ".2f", 1),
    ("other s", "other_s", ".2f", 1), ("tokens gen", "tokens_generated", ".0f", 1),
    ("tokens trained", "tokens_trained", ".0f", 1), ("gen tok/s", "generate_tokens_per_s", ".0f", 1),
    ("update tok/s", "train_tokens_per_s", ".0f", 1), ("update MFU", "mfu", ".1%", 1),
    ("peak MB (alone)", "peak_memory_mb", ".0f", 1), ("peak MB (device)", "peak_memory_device_mb", ".0f", 1),
    ("TFLOPs total", "flops_total", ".2f", 1e12), ("rollouts trained", "rollouts_trained", ".0f", 1),
    ("zero-acc explore", "zero_acc_after_explore", ".3f", 1), ("zero-acc rescue", "zero_acc_after_rescue", ".3f", 1),
]
SHAPE_RATIOS = [("step s", "step_s"), ("generate s", "rollout_s"), ("update s", "train_s"),
                ("tokens trained", "tokens_trained"), ("FLOPs train", "flops_train"), ("FLOPs total", "flops_total")]


def render_shape_markdown(report: dict[str, Any]) -> str:
    """A shape bench (trainer/bench/run.py ``shape=``): per-step means per method, then the ratios
    of step time and FLOPs between methods. Says that the rewards are scripted."""
    meta, cfg = report["meta"], report["meta"]["config"]
    lines = [f"**Rewards are {meta['rewards']}.** Shape {meta['shape']} ({meta['n_params']:,} parameters, random "
             f"weights) on {meta['device']}; {cfg['batch_prompts']} prompts x n_total {cfg['n_total']}, responses up to "
             f"{cfg['max_new_tokens']} tokens; per-step means over {meta['steps']} step{'s' if meta['steps'] != 1 else ''} (seed {meta['seed']}). "
             "MFU: update FLOPs / update seconds / the device's peak bf16 FLOP/s"
             + (f" ({meta['peak_flops'] / 1e12:.0f} TFLOP/s)." if meta.get("peak_flops") else " (unknown here: –)."),
             "", _row(["method", *[c[0] for c in SHAPE_COLUMNS]]), _row(["---"] * (len(SHAPE_COLUMNS) + 1))]
    for name, m in report["methods"].items():
        lines.append(_row([name, *[number(m.get(f), spec, scale=scale) for _, f, spec, scale in SHAPE_COLUMNS]]))
    lines += ["", _row(["ratio", *[c[0] for c in SHAPE_RATIOS]]), _row(["---"] * (len(SHAPE_RATIOS) + 1))]
    for pair, r in report["ratios"].items():
        lines.append(_row([f"**{pair}**", *[ratio_text(r.get(f), 3) for _, f in SHAPE_RATIOS]]))
    return "\n".join(lines)
