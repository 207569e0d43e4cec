"""Calling verifiers safely: exceptions become reward 0, slow verifiers are cut off.

No signals anywhere, so this works from any thread (a Celery pool thread, an eval thread).
Three isolation levels, chosen per task (``isolation="auto"``) or forced by the caller:

``"none"``    tasks that declare ``score_is_safe = True`` (the arithmetic exact match) are
              called directly; exceptions are still caught. ~0.2 us over the bare call,
              which matters when a step scores thousands of responses. No time limit.
``"process"`` tasks that expose ``isolated_scorer`` (a picklable ``(response, problem) ->
              float``, e.g. math-verify) run in persistent worker subprocesses
              (:mod:`trainer.tasks.scorer_process`), several in parallel for a batch. A
              worker past its deadline is killed (SIGKILL) and replaced. This is the only
              hard stop: sympy evaluating ``\\boxed{9^{9^{9}}}`` spends minutes inside one C
              big-integer power that holds the GIL, so neither a watchdog thread nor
              math-verify's own ``signal.alarm`` can even regain control.
``"thread"``  any other task: a pooled daemon watchdog thread runs ``task.score`` and the
              caller waits ``timeout_s``. On a timeout it returns at once, raises
              :class:`ScoreTimeout` inside the stuck thread (``PyThreadState_SetAsyncExc``,
              delivered at its next bytecode: pure-Python loops stop promptly) and abandons
              it. It cannot stop (or even time out) a GIL-holding C call.

Measured on the 2-core dev box: direct ~0.4 us/call (bare call ~0.25 us); watchdog thread
~60 us/call (a new thread per call would be ~110 us); subprocess ~25 us round trip, and
math-verify itself ~2 ms/response (inline 1.9 ms, via one worker 2.1 ms); a math worker
starts in ~0.5 s, paid before any deadline starts, once per run and once per timeout.
"""

from __future__ import annotations

import ctypes
import math
import os
import queue
import threading
import warnings
from typing import Any, Callable, Literal, Sequence

from trainer.tasks.base import Problem, Task

Isolation = Literal["auto", "none", "thread", "process"]
_MAX_IDLE_THREADS = 4


class ScoreTimeout(BaseException):
    """Raised inside an abandoned verifier thread. A BaseException, like math-verify's own
    TimeoutException, so ``except Exception`` blocks in verifier code do not swallow it."""


# -- thread watchdog ---------------------------------------------------------------------------


class _Job:
    def __init__(self, fn: Callable[..., Any], args: tuple):
        self.fn, self.args = fn, args
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.fn(*self.args)
        except BaseException as e:  # noqa: BLE001 - the caller decides; ScoreTimeout included
            self.error = e
        finally:
            self.done.set()


def _thread_loop(jobs: "queue.SimpleQueue[_Job | None]") -> None:
    try:
        while (job := jobs.get()) is not None:
            job.run()
    except ScoreTimeout:  # arrived just after its job had finished: exit as asked
        pass


class _ThreadWorker:
    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=_thread_loop, args=(self.jobs,), daemon=True, name="aero-verifier")
        self.thread.start()


_idle: list[_ThreadWorker] = []
_abandoned: list[threading.Thread] = []
_lock = threading.Lock()
_warned_fallback = False


def _interrupt(thread: threading.Thread) -> None:
    """Best effort: raise ScoreTimeout in ``thread`` at its next bytecode."""
    if thread.ident is None:
        return
    n = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(ScoreTimeout))
    if n > 1:  # CPython's documented contract: undo if more than one thread state was hit
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), None)


def call_in_thread(fn: Callable[..., Any], args: tuple, timeout_s: float) -> tuple[Any, str | None]:
    """Run ``fn(*args)`` on a watchdog thread: ``(value, None)``, ``(None, "error")`` if it
    raised, ``(None, "timeout")`` if not finished within ``timeout_s``."""
    with _lock:
        worker = _idle.pop() if _idle else _ThreadWorker()
    job = _Job(fn, args)
    worker.jobs.put(job)
    if not job.done.wait(timeout_s):
        _interrupt(worker.thread)
        worker.jobs.put(None)  # exit once the job ends; never reused
        with _lock:
            _abandoned.append(worker.thread)
        return None, "timeout"
    with _lock:
        keep = len(_idle) < _MAX_IDLE_THREADS
        if keep:
            _idle.append(worker)
    if not keep:
        worker.jobs.put(None)
    return (None, "error") if job.error is not None else (job.value, None)


def stuck_threads() -> int:
    """Abandoned verifier threads still running (e.g. inside a long C call)."""
    with _lock:
        _abandoned[:] = [t for t in _abandoned if t.is_alive()]
        return len(_abandoned)


# -- public API ----------------------------------------------------------------------------------


def resolve_isolation(task: Task, isolation: Isolation = "auto") -> str:
    if isolation != "auto":
        if isolation == "process" and task.isolated_scorer is None:
            raise ValueError(f"isolation='process' needs task.isolated_scorer; {type(task).__name__} has none")
        return isolation
    if task.score_is_safe:
        return "none"
    return "process" if task.isolated_scorer is not None else "thread"


def _as_reward(value: Any, failure: str | None = None) -> tuple[float, str | None]:
    if failure:
        return 0.0, failure
    try:
        r = float(value)
    except (TypeError, ValueError):
        return 0.0, "error"
    return (r, None) if math.isfinite(r) else (0.0, "error")


def _direct(task: Task, response: str, problem: Problem) -> tuple[float, str | None]:
    try:
        return _as_reward(task.score(response, problem))
    except Exception:  # noqa: BLE001 - any verifier bug is reward 0, counted
        return 0.0, "error"


def safe_score(
    task: Task, response: str, problem: Problem, timeout_s: float, isolation: Isolation = "auto"
) -> tuple[float, str | None]:
    """``task.score(response, problem)`` as ``(reward, None)``; ``(0.0, "error")`` if it raised
    or returned a non-number; ``(0.0, "timeout")`` past ``timeout_s`` seconds (isolation
    "none" has no time limit: only tasks that declare ``score_is_safe`` get it by default)."""
    mode = resolve_isolation(task, isolation)
    if mode == "none":
        return _direct(task, response, problem)
    if mode == "thread":
        return _as_reward(*call_in_thread(task.score, (response, problem), timeout_s))
    return _as_reward(*_run_isolated(task, [(response, problem)], timeout_s, 1)[0])


def score_batch(
    task: Task,
    responses: Sequence[str],
    problems: Sequence[Problem],
    timeout_s: float,
    isolation: Isolation = "auto",
    workers: int | None = None,
) -> tuple[list[float], dict[str, int]]:
    """Rewards for ``responses[i]`` against ``problems[i]`` plus failure counts
    ``{"errors": int, "timeouts": int}`` (each failure scores 0). ``timeout_s`` applies per
    response. Process isolation scores on ``workers`` subprocesses at once (default:
    ``min(4, cpu_count)``). A task whose ``score_many(responses, problems) -> (rewards, stats)``
    is set (the code task) scores the batch itself under its own limits; its stats are added to the
    counts (``sandbox/*`` outcome counts and ``test_pass_sum``)."""
    if len(responses) != len(problems):
        raise ValueError(f"score_batch: {len(responses)} responses but {len(problems)} problems")
    if task.score_many is not None:  # the task bounds and parallelises its own scoring (code: the sandbox)
        rewards, stats = task.score_many(responses, problems)
        return [float(r) for r in rewards], {"errors": 0, "timeouts": 0, **stats}
    mode = resolve_isolation(task, isolation)
    if mode == "none":
        scored = [_direct(task, r, p) for r, p in zip(responses, problems)]
    elif mode == "thread":
        scored = [_as_reward(*call_in_thread(task.score, (r, p), timeout_s)) for r, p in zip(responses, problems)]
    else:
        n = workers or min(4, os.cpu_count() or 1)
        scored = [_as_reward(v, f) for v, f in _run_isolated(task, list(zip(responses, problems)), timeout_s, n)]
    counts = {"errors": 0, "timeouts": 0}
    for _, failure in scored:
        if failure:
            counts["errors" if failure == "error" else "timeouts"] += 1
    return [r for r, _ in scored], counts


def _run_isolated(task: Task, items: list[tuple], timeout_s: float, workers: int) -> list[tuple[Any, str | None]]:
    """``task.isolated_scorer`` over ``items`` in verifier subprocesses; where not one can start,
    on watchdog threads (no hard stop for a GIL-holding hang), with a warning the first time."""
    # Imported on first use: it registers exit and at-fork hooks only subprocess scoring needs.
    from trainer.tasks.scorer_process import WorkersUnavailable, run_isolated

    global _warned_fallback
    try:
        return run_isolated(task.isolated_scorer, items, timeout_s, workers, tuple(task.isolated_preload))
    except WorkersUnavailable as e:
        if not _warned_fallback:
            warnings.warn(f"verifier subprocesses unavailable ({e}); using watchdog threads", RuntimeWarning)
            _warned_fallback = True
        return [call_in_thread(task.isolated_scorer, tuple(args), timeout_s) for args in items]
