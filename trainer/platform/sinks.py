"""Metric sinks. Every key is slash-namespaced and documented in docs/metrics.md.

The trainer writes through the ``MetricSink`` protocol only; the platform adds a DB sink
(worker/sink.py). Besides the numbers, the loop announces the events a sink may need to keep
its store consistent with the checkpoints: a resume (``truncate_after``) and each checkpoint
(``before_checkpoint``, ``on_checkpoint``). The loop calls every method; a sink that subclasses
the protocol inherits no-op events and implements only what it needs.
"""

from __future__ import annotations

import json
import math
import os
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

    def log_detail(self, step: int, detail: dict[str, Any]) -> None:
        """One step's detail apart from its numbers (trainer/platform/step_detail.py): {"rollouts": [...],
        "histograms": {...}}. Idempotent on step, like ``log``; a sink that keeps numbers only ignores it."""

    def truncate_after(self, step: int) -> None:
        """The run resumed from the checkpoint of ``step``: drop what was logged after it (the loop
        logs those steps again), so a run that stops before it gets there keeps no lost future."""

    def before_checkpoint(self, step: int) -> None:
        """The loop is about to write the checkpoint of ``step``: make every step logged so far
        durable first, or a crash right after the checkpoint would lose steps the resume skips."""

    def on_checkpoint(self, step: int, path: Path) -> None:
        """The checkpoint of ``step`` is complete in directory ``path`` (and is the one a resume loads)."""

    def close(self) -> None: ...


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class JsonlSink(MetricSink):
    """Appends one JSON object per line to DIR/metrics.jsonl (steps), DIR/evals.jsonl and
    DIR/details.jsonl (each step's rollout sample and histograms).
    On resume, lines past the resumed step are dropped by ``truncate_after``. Logging a step the
    file already holds replaces its line (the later one wins, as in the platform's store): the
    verl launcher re-forwards a resumed run's earlier steps (trainer/verl/step_metrics.py)."""

    def __init__(self, out_dir: str | Path):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.dir / "metrics.jsonl"
        self.evals_path = self.dir / "evals.jsonl"
        self.details_path = self.dir / "details.jsonl"
        self._steps: dict[Path, set[int]] = {}

    def _lines(self, path: Path) -> list[str]:
        return [ln for ln in path.read_text().splitlines() if ln] if path.exists() else []

    def _keep(self, path: Path, keep) -> None:
        lines = [ln for ln in self._lines(path) if keep(json.loads(ln)["step"])]
        # A new file swapped in atomically, never rewritten in place: a reader that follows the
        # file by byte offset (JsonlRelay) sees a new inode and starts again from the top.
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text("".join(ln + "\n" for ln in lines))
        os.replace(tmp, path)
        self._steps[path] = {json.loads(ln)["step"] for ln in lines}

    def _append(self, path: Path, step: int, row: dict) -> None:
        if path not in self._steps:
            self._steps[path] = {json.loads(ln)["step"] for ln in self._lines(path)}
        if step in self._steps[path]:
            self._keep(path, lambda s: s != step)
        with path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        self._steps[path].add(step)

    def truncate_after(self, step: int) -> None:
        for path in (self.metrics_path, self.evals_path, self.details_path):
            if path.exists():
                self._keep(path, lambda s: s <= step)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._append(self.metrics_path, step, {"step": step, **{k: _clean(v) for k, v in metrics.items()}})

    def log_eval(self, step: int, results: dict[str, dict[str, Any]]) -> None:
        self._append(self.evals_path, step, {"step": step, "results": results})

    def log_detail(self, step: int, detail: dict[str, Any]) -> None:
        self._append(self.details_path, step, {"step": step, "detail": detail})

    def close(self) -> None:
        pass


class MultiSink(MetricSink):
    """Several sinks as one (``aero bench`` keeps numbers in memory and writes JSONL); every
    call and event goes to each, in order."""

    def __init__(self, *sinks: MetricSink):
        self.sinks = [s for s in sinks if s is not None]

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for s in self.sinks:
            s.log(step, metrics)

    def log_eval(self, step: int, results: dict[str, dict[str, Any]]) -> None:
        for s in self.sinks:
            s.log_eval(step, results)

    def log_detail(self, step: int, detail: dict[str, Any]) -> None:
        for s in self.sinks:
            s.log_detail(step, detail)

    def truncate_after(self, step: int) -> None:
        for s in self.sinks:
            s.truncate_after(step)

    def before_checkpoint(self, step: int) -> None:
        for s in self.sinks:
            s.before_checkpoint(step)

    def on_checkpoint(self, step: int, path: Path) -> None:
        for s in self.sinks:
            s.on_checkpoint(step, path)

    def close(self) -> None:
        for s in self.sinks:
            s.close()


class MemorySink(MetricSink):
    """Keeps everything in memory (benchmarks, tests). Idempotent on step: a re-logged step replaces.
    ``checkpoints`` lists the announced (step, path) pairs."""

    def __init__(self) -> None:
        self.steps: dict[int, dict[str, float]] = {}
        self.evals: dict[int, dict[str, dict[str, Any]]] = {}
        self.details: dict[int, dict[str, Any]] = {}
        self.checkpoints: list[tuple[int, Path]] = []

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.steps[step] = dict(metrics)

    def log_eval(self, step: int, results: dict[str, dict[str, Any]]) -> None:
        self.evals[step] = results

    def log_detail(self, step: int, detail: dict[str, Any]) -> None:
        self.details[step] = detail

    def truncate_after(self, step: int) -> None:
        self.steps = {s: m for s, m in self.steps.items() if s <= step}
        self.evals = {s: r for s, r in self.evals.items() if s <= step}
        self.details = {s: d for s, d in self.details.items() if s <= step}

    def on_checkpoint(self, step: int, path: Path) -> None:
        self.checkpoints.append((step, Path(path)))

    def close(self) -> None:
        pass

    def series(self, key: str) -> list[float]:
        return [self.steps[s].get(key, float("nan")) for s in sorted(self.steps)]
