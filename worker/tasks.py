"""Celery tasks: thin wrappers; the logic is in worker/runner.py (plain functions, testable
without a broker). The backend sends tasks by name ("worker.tasks.train_run")."""

from __future__ import annotations

from worker.celery_app import app
from worker.runner import execute_run


@app.task(name="worker.tasks.train_run")
def train_run(run_id: int) -> str:
    """Train (or resume) one run; returns its outcome. Never raises for a training error: the
    run is marked failed with its error text, and the message is acknowledged."""
    return execute_run(int(run_id))
