"""Render an `aero bench` report as Markdown tables (printed by the CLI, pasted in BENCHMARKS.md)."""

from __future__ import annotations

from typing import Any

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
        ov = m["eval"].get("overall", {})
        lines.append(_row([name, *[_cell(f, fld, m[fld]) for _, fld, f in COLUMNS],
                           f"{ov.get('avg_at_k', float('nan')):.3f}", f"{ov.get('pass_at_k', float('nan')):.3f}"]))
    for pair, r in report["ratios"].items():
        lines.append(_row([f"**{pair}**", *[f"{r[fld]:.3f}" if fld in r else "" for _, fld, _ in COLUMNS],
                           f"{r.get('final_avg_at_k', float('nan')):.3f}", f"{r.get('final_pass_at_k', float('nan')):.3f}"]))
    benches = [b for b in report["base_eval"] if b != "overall"] + ["overall"]
    lines += ["", f"Final Avg@{k} / Pass@{k} per benchmark (base = the checkpoint every method starts from).", "",
              _row(["method", *benches]), _row(["---"] * (len(benches) + 1))]
    rows = [("base", report["base_eval"])] + [(n, m["eval"]) for n, m in methods.items()]
    for name, ev in rows:
        lines.append(_row([name, *[f"{ev[b]['avg_at_k']:.3f} / {ev[b]['pass_at_k']:.3f}" if b in ev else "" for b in benches]]))
    return "\n".join(lines)
