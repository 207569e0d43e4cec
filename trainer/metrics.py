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
