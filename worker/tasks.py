"""Celery tasks: thin wrappers; the logic is in worker/runner.py (plain functions, testable
without a broker). The backend sends tasks by name ("worker.tasks.train_run")."""

from __future__ import annotations

# Preload the trainer (torch, transformers) in the worker's main process: prefork pool processes
# fork from it with everything imported, so a task, and a takeover after a crash, starts in
# milliseconds instead of re-importing torch in each pool process (5-15 s on a busy 2-core box).
import trainer.loop  # noqa: F401
from worker.celery_app import app
from worker.runner import execute_run


@app.task(name="worker.tasks.train_run")
def train_run(run_id: int) -> str:
    """Train (or resume) one run; returns its outcome. Never raises for a training error: the
    run is marked failed with its error text, and the message is acknowledged."""
    return execute_run(int(run_id))
