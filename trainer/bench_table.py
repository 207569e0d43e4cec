"""Render an `aero bench` report as Markdown tables (printed by the CLI, pasted in BENCHMARKS.md)."""

from __future__ import annotations

from typing import Any

import common.metric_keys as mk

COLUMNS = [
    ("step s", "step_s", "{:.3f}"), ("rollout s", "rollout_s", "{:.3f}"), ("train s", "train_s", "{:.3f}"),
    ("rollouts gen", "rollouts_generated", "{:.1f}"), ("rollouts trained", "rollouts_trained", "{:.1f}"),
    ("tokens gen", "tokens_generated", "{:.0f}"), ("tokens trained", "tokens_trained", "{:.0f}"),
    ("GFLOPs rollout", "flops_rollout", "{:.2f}"), ("GFLOPs train", "flops_train", "{:.2f}"),
    ("GFLOPs total", "flops_total", "{:.2f}"), ("zero-acc explore", "zero_acc_after_explore", "{:.3f}"),
    ("zero-acc rescue", "zero_acc_after_rescue", "{:.3f}"),
]


def _cell(fmt: str, field: str, value: float) -> str:
    return fmt.format(value / 1e9 if field.startswith("flops") else value)


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
                           f"{ov.get('avg_at_k', float('nan')):.3f}", f"{ov.get('pass_at_k', float('nan')):.3f}"]))
    for pair, r in report["ratios"].items():
        lines.append(_row([f"**{pair}**", *[f"{r[fld]:.3f}" if fld in r else "" for _, fld, _ in COLUMNS],
                           f"{r.get('final_avg_at_k', float('nan')):.3f}", f"{r.get('final_pass_at_k', float('nan')):.3f}"]))
    benches = [b for b in report["base_eval"] if b != mk.OVERALL] + [mk.OVERALL]
    lines += ["", f"Final Avg@{k} / Pass@{k} per benchmark (base = the checkpoint every method starts from).", "",
              _row(["method", *benches]), _row(["---"] * (len(benches) + 1))]
    rows = [("base", report["base_eval"])] + [(n, m["eval"]) for n, m in methods.items()]
    for name, ev in rows:
        lines.append(_row([name, *[f"{ev[b]['avg_at_k']:.3f} / {ev[b]['pass_at_k']:.3f}" if b in ev else "" for b in benches]]))
    return "\n".join(lines)


# --- several seeds (`aero bench --seeds`) ----------------------------------------------------
SEED_COLUMNS = [
    ("step s", "step_s", "{:.3f}", 1), ("rollout s", "rollout_s", "{:.3f}", 1), ("train s", "train_s", "{:.3f}", 1),
    ("rollouts trained", "rollouts_trained", "{:.0f}", 1), ("GFLOPs total", "flops_total", "{:.2f}", 1e9),
    ("zero-acc explore", "zero_acc_after_explore", "{:.3f}", 1), ("zero-acc rescue", "zero_acc_after_rescue", "{:.3f}", 1),
]


def pm(ci: dict[str, Any] | None, fmt: str = "{:.3f}", scale: float = 1.0, sign: bool = False) -> str:
    """'mean ± half-width' of a mean_ci dict ('mean' alone with one seed; '–' when missing)."""
    if not ci or ci.get("mean") is None:
        return "–"
    f = fmt.replace("{:", "{:+") if sign else fmt
    text = f.format(ci["mean"] / scale)
    return text if ci.get("lo") is None else f"{text} ± {fmt.format((ci['hi'] - ci['lo']) / 2 / scale)}"


def bracket(ci: dict[str, Any] | None, fmt: str = "{:.2f}") -> str:
    """'mean [lo, hi]' of a ratio summary."""
    if not ci or ci.get("mean") is None:
        return "–"
    text = fmt.format(ci["mean"])
    return text if ci.get("lo") is None else f"{text} [{fmt.format(ci['lo'])}, {fmt.format(ci['hi'])}]"


def render_seeds_markdown(report: dict[str, Any]) -> str:
    meta, summ = report["meta"], report["summary"]
    k, seeds = meta["eval"]["k"], meta["seeds"]
    head = ["method", *[c[0] for c in SEED_COLUMNS], f"final Avg@{k}", "gain over base"]
    lines = [f"{len(seeds)} seeds ({', '.join(map(str, seeds))}), {meta['steps']} steps, base: {meta['base']}; "
             f"mean ± 95% t half-width across seeds; final = mean of the last 3 evals (overall); {meta['machine']}.",
             "", _row(head), _row(["---"] * len(head))]
    for name, m in summ["methods"].items():
        lines.append(_row([name, *[pm(m[f], fmt, scale) for _, f, fmt, scale in SEED_COLUMNS],
                           pm(m["final_avg_at_k"].get(mk.OVERALL)), pm(m["gain"].get(mk.OVERALL), sign=True)]))
    for pair, r in summ["ratios"].items():
        lines.append(_row([f"**{pair}**", *[bracket(r[f]) for _, f, _, _ in SEED_COLUMNS], "",
                           f"diff {pm(r['final_diff'], sign=True)}"]))
    benches = list(summ["base_eval"])
    lines += ["", f"Final Avg@{k} (mean of the last 3 evals) minus the base, per benchmark (base row: the base's Avg@{k}).",
              "", _row(["method", *benches]), _row(["---"] * (len(benches) + 1)),
              _row(["base", *[pm(summ["base_eval"][b]) for b in benches]])]
    for name, m in summ["methods"].items():
        lines.append(_row([name, *[pm(m["gain"][b], sign=True) for b in benches]]))
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
    lines = [f"Compute to reach GRPO's Avg@{k} gain (base {pm(r['base'])}, GRPO final {pm(r['final'])}; curves "
             "smoothed over 3 evals; training compute only):", "", _row(head), _row(["---"] * len(head))]
    for name, rows in r["runs"].items():
        for row, ratio in zip(rows, r["ratios"][name]):
            per_seed = ", ".join("not reached" if v is None else f"{v:.2f}" for v in ratio["flops"]["ratios"])
            lines.append(_row([name, f"{row['fraction']:.0%}", f"{row['reached']}/{row['of']}",
                               pm(row["flops"], "{:.0f}", 1e9), pm(row["seconds"], "{:.1f}"),
                               pm(row.get("rollouts"), "{:.0f}"), bracket(ratio["flops"]), bracket(ratio["seconds"]),
                               bracket(ratio.get("rollouts")), per_seed]))
    return "\n".join(lines)


def _p(test: dict[str, Any] | None) -> str:
    return "–" if not test else f"{test['p_value']:.3g}"


def _reach_cell(row: dict[str, Any], cost: str, fmt: str, scale: float) -> str:
    """Per seed, the cost to reach (or 'not reached'), then the mean over the seeds that did."""
    per_seed = "; ".join(f"s{s['seed']} " + ("not reached" if s[cost] is None else fmt.format(s[cost] / scale))
                         for s in row["seeds"])
    return f"{row['reached']}/{row['of']}: {per_seed}"


def render_leaderboard(rows: list[dict[str, Any]], k: int, baseline: str | None) -> str:
    """The arena's leaderboard (trainer/bench_arena.py) as Markdown: accuracy and p-value, costs
    per step, then the compute to reach 50/75/90% of the baseline's gain per seed."""
    if not rows:
        return ""
    base = baseline or "the baseline"
    head = ["method", f"final Avg@{k}", f"diff vs {base}", "p", "GFLOPs / step", "s / step", "rollouts gen / step",
            "rollouts trained / step", "zero-acc ratio"]
    lines = [f"Leaderboard (equal rollout budget n_total per prompt; mean ± 95% t half-width across seeds; p: paired "
             f"sign-flip permutation over problems of the last evaluation against {base}):", "",
             _row(head), _row(["---"] * len(head))]
    for r in rows:
        lines.append(_row([f"**{r['method']}**" if r["baseline"] else r["method"], pm(r["final"]),
                           "—" if r["baseline"] else pm(r["diff"], sign=True), "—" if r["baseline"] else _p(r["test"]),
                           pm(r["flops_total"], "{:.2f}", 1e9), pm(r["step_s"], "{:.3f}"),
                           pm(r["rollouts_generated"], "{:.1f}"), pm(r["rollouts_trained"], "{:.1f}"),
                           pm(r["zero_acc_after_rescue"])]))
    head = ["method", "target (of the gain)", "GFLOPs to reach, per seed", "seconds to reach, per seed",
            "rollouts to reach, per seed"]
    lines += ["", f"Compute to reach {base}'s gain, per seed (training compute only; 'not reached' kept):", "",
              _row(head), _row(["---"] * len(head))]
    for r in rows:
        for t in r["reach"]:
            lines.append(_row([r["method"], f"{t['fraction']:.0%}", _reach_cell(t, "flops", "{:.0f}", 1e9),
                               _reach_cell(t, "seconds", "{:.1f}", 1.0), _reach_cell(t, "rollouts", "{:.0f}", 1.0)]))
    return "\n".join(lines)


# --- a shape (`aero bench --shape`) -----------------------------------------------------------
SHAPE_COLUMNS = [
    ("step s", "step_s", "{:.2f}", 1), ("generate s", "rollout_s", "{:.2f}", 1), ("update s", "train_s", "{:.2f}", 1),
    ("other s", "other_s", "{:.2f}", 1), ("tokens gen", "tokens_generated", "{:.0f}", 1),
    ("tokens trained", "tokens_trained", "{:.0f}", 1), ("gen tok/s", "generate_tokens_per_s", "{:.0f}", 1),
    ("update tok/s", "train_tokens_per_s", "{:.0f}", 1), ("update MFU", "mfu", "{:.1%}", 1),
    ("peak MB (alone)", "peak_memory_mb", "{:.0f}", 1), ("peak MB (device)", "peak_memory_device_mb", "{:.0f}", 1),
    ("TFLOPs total", "flops_total", "{:.2f}", 1e12), ("rollouts trained", "rollouts_trained", "{:.0f}", 1),
    ("zero-acc explore", "zero_acc_after_explore", "{:.3f}", 1), ("zero-acc rescue", "zero_acc_after_rescue", "{:.3f}", 1),
]
SHAPE_RATIOS = [("step s", "step_s"), ("generate s", "rollout_s"), ("update s", "train_s"),
                ("tokens trained", "tokens_trained"), ("FLOPs train", "flops_train"), ("FLOPs total", "flops_total")]


def _fmt(value: Any, fmt: str, scale: float = 1.0) -> str:
    return "–" if value is None or value != value else fmt.format(value / scale)


def render_shape_markdown(report: dict[str, Any]) -> str:
    """A shape bench (trainer/bench.py ``shape=``): per-step means per method, then the ratios
    of step time and FLOPs between methods. Says that the rewards are scripted."""
    meta, cfg = report["meta"], report["meta"]["config"]
    lines = [f"**Rewards are {meta['rewards']}.** Shape {meta['shape']} ({meta['n_params']:,} parameters, random "
             f"weights) on {meta['device']}; {cfg['batch_prompts']} prompts x n_total {cfg['n_total']}, responses up to "
             f"{cfg['max_new_tokens']} tokens; per-step means over {meta['steps']} step{'s' if meta['steps'] != 1 else ''} (seed {meta['seed']}). "
             "MFU: update FLOPs / update seconds / the device's peak bf16 FLOP/s"
             + (f" ({meta['peak_flops'] / 1e12:.0f} TFLOP/s)." if meta.get("peak_flops") else " (unknown here: –)."),
             "", _row(["method", *[c[0] for c in SHAPE_COLUMNS]]), _row(["---"] * (len(SHAPE_COLUMNS) + 1))]
    for name, m in report["methods"].items():
        lines.append(_row([name, *[_fmt(m.get(f), fmt, scale) for _, f, fmt, scale in SHAPE_COLUMNS]]))
    lines += ["", _row(["ratio", *[c[0] for c in SHAPE_RATIOS]]), _row(["---"] * (len(SHAPE_RATIOS) + 1))]
    for pair, r in report["ratios"].items():
        lines.append(_row([f"**{pair}**", *[_fmt(r.get(f), "{:.3f}") for _, f in SHAPE_RATIOS]]))
    return "\n".join(lines)
