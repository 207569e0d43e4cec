"""The database metric sink: a trainer ``MetricSink`` that writes to the platform's store.

Steps are buffered and written as one batched upsert (``backend.db.metrics.upsert_step_metrics``,
idempotent on (run, step)), so a resumed run that re-logs the steps after its checkpoint leaves
each step stored exactly once.

When a batch is written, and by whom:

- every ``flush_s`` seconds (0.25 s on the platform, AERO_SINK_FLUSH_S: steps slower than that
  are written one by one, so curves are live; faster steps are batched), or when ``max_rows`` steps wait: *in the
  background*, on one writer thread, so the training thread only appends to a dict;
- when the loop announces a checkpoint (``before_checkpoint``), at an eval, on ``truncate_after``
  and at ``close()``: *synchronously*, after the background writes drained. So every step a
  checkpoint covers is durable before the checkpoint exists; a crash can only lose steps that
  the resume redoes.

Once the checkpoint is written the loop says so (``on_checkpoint``) and the sink notes it in the
store's ``checkpoints`` table, while ``owner`` still owns the run (a worker that lost its run
records nothing for the new owner's directory).

A failed background write (store briefly unreachable) puts its rows back in the buffer for the
next flush; a failed synchronous write raises (the run cannot promise durability, so it fails).
``stats()`` separates the time the training thread was blocked (the ingestion overhead that
matters, target < 1% of step time) from the time spent writing in the background.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from backend.db.metrics import (clean_metrics, delete_steps_after, record_checkpoint, upsert_eval_results,
                                upsert_step_metrics)
from backend.db.rollouts import upsert_step_details
from backend.db.runs import record_progress
from backend.db.session import session_scope
from trainer.platform.sinks import MetricSink

log = logging.getLogger(__name__)


class DbSink(MetricSink):
    """Buffered, idempotent step-metric and eval writer for one run.

    ``owner``: the worker (``host:pid:start``) whose checkpoints are recorded; None records any.
    ``background=False`` writes inline (tests, tools). ``clock`` drives the time-based flush.
    """

    def __init__(self, database_url: str, run_id: int, *, owner: str | None = None, flush_s: float = 0.25,
                 max_rows: int = 256, background: bool = True, clock: Callable[[], float] = time.monotonic):
        self.url, self.run_id, self.owner = database_url, run_id, owner
        self.flush_s, self.max_rows, self.clock = flush_s, max_rows, clock
        self.buffer: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"aero-sink-{run_id}") if background else None
        self._last: Future | None = None
        self.last_flush = clock()
        self.flushes = self.rows_written = self.failed_writes = 0
        self.write_s = self.blocked_s = 0.0

    # ------------------------------------------------------------ MetricSink

    def log(self, step: int, metrics: dict[str, float]) -> None:
        t0 = time.perf_counter()
        row = clean_metrics(metrics)  # fails at its step if a value is not a number
        with self._lock:
            self.buffer[int(step)] = row
            n = len(self.buffer)
        if n >= self.max_rows or self.clock() - self.last_flush >= self.flush_s:
            self._flush_soon()
        self.blocked_s += time.perf_counter() - t0

    def log_eval(self, step: int, results: dict[str, dict[str, Any]]) -> None:
        t0 = time.perf_counter()
        self._drain()
        batch = self._take()
        with session_scope(self.url) as s:
            if batch:
                self.rows_written += upsert_step_metrics(s, self.run_id, batch)
            upsert_eval_results(s, self.run_id, step, results)
        self.write_s += time.perf_counter() - t0
        self.flushes += 1
        self.blocked_s += time.perf_counter() - t0

    def log_detail(self, step: int, detail: dict[str, Any]) -> None:
        """A step's rollout sample and histograms, written on the writer thread (inline without one).
        Best effort: a failed write is logged and dropped (the sample is a view of the step, not
        its record; the numbers are what a checkpoint must cover)."""
        t0 = time.perf_counter()
        if self._pool is None:
            self._write_detail(int(step), detail)
        else:
            self._last = self._pool.submit(self._write_detail, int(step), detail)
        self.blocked_s += time.perf_counter() - t0

    def _write_detail(self, step: int, detail: dict[str, Any]) -> None:
        try:
            with session_scope(self.url) as s:
                upsert_step_details(s, self.run_id, {step: detail})
        except Exception:  # noqa: BLE001 - best effort (log_detail's docstring)
            log.warning("run %s: storing the rollout sample of step %d failed", self.run_id, step, exc_info=True)

    def before_checkpoint(self, step: int) -> None:
        """Write every logged step now: the checkpoint about to exist covers them."""
        t0 = time.perf_counter()
        self.flush()
        self.blocked_s += time.perf_counter() - t0

    def on_checkpoint(self, step: int, path: Path) -> None:
        """Note the checkpoint in the store, with a heartbeat that proves ``owner`` still owns the run
        (the write comes first in its transaction; a lost run records nothing)."""
        t0 = time.perf_counter()
        with session_scope(self.url) as s:
            if self.owner is None or record_progress(s, self.run_id, worker=self.owner) is not None:
                record_checkpoint(s, self.run_id, step, str(path))
        self.blocked_s += time.perf_counter() - t0

    def close(self) -> None:
        t0 = time.perf_counter()
        self.flush()
        self.blocked_s += time.perf_counter() - t0
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # ------------------------------------------------------------ flushing

    def _take(self) -> dict[int, dict[str, Any]]:
        with self._lock:
            batch, self.buffer = self.buffer, {}
        return batch

    def _write(self, batch: dict[int, dict[str, Any]], *, background: bool) -> None:
        t0 = time.perf_counter()
        try:
            with session_scope(self.url) as s:
                n = upsert_step_metrics(s, self.run_id, batch)
        except Exception:
            self.failed_writes += 1
            with self._lock:  # put the rows back, without overwriting newer logs of the same step
                self.buffer = {**batch, **self.buffer}
            if not background:
                raise
            log.warning("run %s: writing %d step(s) failed; retrying at the next flush", self.run_id, len(batch),
                        exc_info=self.failed_writes == 1)
            return
        self.rows_written += n
        self.flushes += 1
        self.write_s += time.perf_counter() - t0

    def _flush_soon(self) -> None:
        """Hand the buffer to the writer thread (inline when there is none)."""
        batch = self._take()
        self.last_flush = self.clock()
        if not batch:
            return
        if self._pool is None:
            self._write(batch, background=False)
        else:
            self._last = self._pool.submit(self._write, batch, background=True)

    def _drain(self) -> None:
        """Wait for the background writes handed out so far (they never raise)."""
        if self._last is not None:
            self._last.result()
            self._last = None

    def flush(self) -> None:
        """Write everything logged so far, now, and return when it is committed (raises on error)."""
        self._drain()
        batch = self._take()
        self.last_flush = self.clock()
        if batch:
            self._write(batch, background=False)

    def truncate_after(self, step: int) -> None:
        """On resume from the checkpoint of ``step``: drop stored steps and evals after it.

        The resumed run re-logs them (upserts would overwrite them anyway); deleting first means
        a run that is cancelled or fails before it gets there keeps no rows from the lost future.
        """
        with self._lock:
            self.buffer = {s: m for s, m in self.buffer.items() if s <= step}
        self.flush()
        with session_scope(self.url) as s:
            delete_steps_after(s, self.run_id, step)  # also invalidates the API's cached answers

    def stats(self) -> dict[str, float]:
        """Writes, rows, seconds the training thread was blocked in the sink (the ingestion
        overhead) and seconds spent writing (mostly in the background)."""
        return {"flushes": self.flushes, "rows": self.rows_written, "failed_writes": self.failed_writes,
                "blocked_s": round(self.blocked_s, 4), "write_s": round(self.write_s, 4)}
