"""`aero bench`: methods trained side by side from the same base and seed, and their report.

``run``: one bench (every method interleaved step by step, or a shape bench on the scripted
strata task) and its report; ``seeds``: the bench repeated over seeds, summarised with
confidence intervals; ``arena``: the rollout-allocation arena's leaderboard against GRPO;
``device``: each method's peak memory and its update's MFU; ``table``: the report as Markdown.
The report's schema is docs/bench.md.

Names are re-exported lazily (PEP 562), so that the light modules (``table``, ``arena``) load
without torch and the training loop that ``run`` imports.
"""

from __future__ import annotations

from common.lazy import lazy_exports

_EXPORTS: dict[str, tuple[str, ...]] = {
    "run": ("ABLATIONS", "COST_FIELDS", "MAIN_METHODS", "SHAPE_BASE", "SHAPE_STEPS", "run_bench"),
    "seeds": ("run_bench_seeds", "summarize_seeds"),
    "arena": ("leaderboard",),
    "device": ("MethodMemory", "device_name", "peak_flops"),
    "table": ("render_leaderboard", "render_markdown", "render_reach", "render_seeds_markdown", "render_shape_markdown"),
}
__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
