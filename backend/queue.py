"""Enqueueing runs. The API never imports the worker: it sends the task by name
(``worker.tasks.train_run``) to the broker from :func:`backend.settings.broker_url`, on the
``cpu`` or ``gpu`` queue (:func:`backend.services.configs.queue_for`)."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from celery import Celery

from backend.settings import Settings, broker_url

TRAIN_TASK = "worker.tasks.train_run"

Enqueuer = Callable[[int, str], None]
"""enqueue(run_id, queue): hand a run to the workers. Raises on failure."""


@lru_cache(maxsize=8)
def celery_client(url: str) -> Celery:
    """A send-only Celery app for ``url`` (one per broker URL and process)."""
    app = Celery("aero-api", broker=url)
    app.conf.update(
        task_ignore_result=True,
        broker_connection_timeout=5,
        broker_connection_retry_on_startup=False,
        task_publish_retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1},
    )
    return app


def enqueue_run(settings: Settings, run_id: int, queue: str) -> None:
    """Send ``train_run(run_id)`` to ``queue`` (used by the API and by stale-run recovery)."""
    celery_client(broker_url(settings)).send_task(TRAIN_TASK, args=[run_id], queue=queue)


def celery_enqueuer(settings: Settings) -> Enqueuer:
    return lambda run_id, queue: enqueue_run(settings, run_id, queue)
