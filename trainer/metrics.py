"""Metric sinks. Every key is slash-namespaced and documented in docs/metrics.md.

The trainer writes through the ``MetricSink`` protocol only; the platform adds a DB sink.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Protocol


class MetricSink(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None:
        """One training step's metrics. Must be idempotent on step (a resumed run may re-log a step)."""
        ...

    def log_eval(self, step: int, results: dict[str, dict[str, Any]]) -> None:
        """Per-benchmark eval results: {benchmark: {"k", "avg_at_k", "pass_at_k", "avg_ci", "pass_ci",
        "per_problem": [[n, c], ...]}}."""
        ...

    def close(self) -> None: ...


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class JsonlSink:
    """Appends one JSON object per line to DIR/metrics.jsonl (steps) and DIR/evals.jsonl.
    On resume, lines past the resumed step are dropped by ``truncate_after``."""

    def __init__(self, out_dir: str | Path):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.dir / "metrics.jsonl"
        self.evals_path = self.dir / "evals.jsonl"

    def truncate_after(self, step: int) -> None:
        for path in (self.metrics_path, self.evals_path):
            if path.exists():
                keep = [l for l in path.read_text().splitlines() if l and json.loads(l)["step"] <= step]
                path.write_text("".join(l + "\n" for l in keep))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        with self.metrics_path.open("a") as f:
            f.write(json.dumps({"step": step, **{k: _clean(v) for k, v in metrics.items()}}) + "\n")

    def log_eval(self, step: int, results: dict[str, dict[str, Any]]) -> None:
        with self.evals_path.open("a") as f:
            f.write(json.dumps({"step": step, "results": results}) + "\n")

    def close(self) -> None:
        pass


class MultiSink:
    def __init__(self, *sinks: MetricSink):
        self.sinks = [s for s in sinks if s is not None]

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for s in self.sinks:
            s.log(step, metrics)

    def log_eval(self, step: int, results: dict[str, dict[str, Any]]) -> None:
        for s in self.sinks:
            s.log_eval(step, results)

    def close(self) -> None:
        for s in self.sinks:
            s.close()


# --- FLOPs accounting (docs/metrics.md "FLOPs") ----------------------------------------------
# Forward cost of one token at context position p (1-based), after Kaplan et al. 2020 (Table 1):
#   C_fwd(p) = 2 N + 2 n_layer p d_model
# 2N covers every weight matmul (N = all parameters, tied embeddings once, i.e. the LM head; the
# embedding lookup is free); the second term is attention's QK^T and AV against p cached keys.
# Training a token costs 3 forwards (forward + backward = 2x forward); each extra no-grad forward
# (reference-policy log-probs for KL) adds one C_fwd. Rollout tokens are counted per sampled row:
# the row's prompt is prefilled once, then each generated token is one forward.


def sequence_forward_flops(n_params: int, n_layers: int, d_model: int, length: int) -> float:
    """Sum of C_fwd(p) for p = 1..length: 2 N L + 2 n_layer d_model L (L + 1) / 2."""
    return 2.0 * n_params * length + n_layers * d_model * length * (length + 1)


def rollout_flops(n_params: int, n_layers: int, d_model: int, seq_lengths: list[int]) -> float:
    """Generation FLOPs: one forward over prompt + response positions of each sampled row."""
    return sum(sequence_forward_flops(n_params, n_layers, d_model, L) for L in seq_lengths)


def train_flops(n_params: int, n_layers: int, d_model: int, seq_lengths: list[int], extra_forwards: int = 0) -> float:
    """Update FLOPs: (3 + extra_forwards) forwards over every trained sequence (prompt + response)."""
    return (3 + extra_forwards) * rollout_flops(n_params, n_layers, d_model, seq_lengths)


class MemorySink:
    """Keeps everything in memory (benchmarks, tests). Idempotent on step: a re-logged step replaces."""

    def __init__(self) -> None:
        self.steps: dict[int, dict[str, float]] = {}
        self.evals: dict[int, dict[str, dict[str, Any]]] = {}

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.steps[step] = dict(metrics)

    def log_eval(self, step: int, results: dict[str, dict[str, Any]]) -> None:
        self.evals[step] = results

    def close(self) -> None:
        pass

    def series(self, key: str) -> list[float]:
        return [self.steps[s].get(key, float("nan")) for s in sorted(self.steps)]
