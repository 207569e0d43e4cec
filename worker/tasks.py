"""Celery tasks: thin wrappers; the logic is in worker/runner.py (plain functions, testable
without a broker). The backend sends tasks by name ("worker.tasks.train_run")."""

from __future__ import annotations

from sqlalchemy.exc import InterfaceError, OperationalError

from trainer.spec.engine_registry import preload_engines

from worker.celery_app import app
from worker.runner import execute_run

# Preload what each engine asks (trainer/spec/engine_registry.py ``EngineSpec.preload``: torch, transformers and
# the embedded loop) in the worker's main process: prefork pool processes fork from it with
# everything imported, so a task, and a takeover after a crash, starts in milliseconds instead of
# re-importing torch in each pool process (5-15 s on a busy 2-core box).
PRELOADED = preload_engines()


@app.task(name="worker.tasks.train_run", bind=True, autoretry_for=(OperationalError, InterfaceError), retry_backoff=2,
          retry_backoff_max=60, retry_jitter=True, max_retries=8)
def train_run(self, run_id: int) -> str:
    """Serve one ticket: train (or resume) the run the fair-share rule picks on this message's
    queue (worker/runner.py); returns its outcome. A training error never raises: the run is
    marked failed with its error text. The store being unreachable before training starts (or
    for longer than the run's owner waits for it, worker/runner.py) raises, and the task is
    retried with backoff (2 s .. 60 s, 8 times): its run must not be left queued with no message
    behind it."""
    queue = (self.request.delivery_info or {}).get("routing_key") or None
    return execute_run(int(run_id), queue=queue)
