"""The Celery app: broker from backend.settings, reliability settings, two queues.

Run a worker with ``celery -A worker.celery_app worker -Q cpu`` (``aero up`` does this for you).

Reliability (docs/deploy.md "Redelivery"): a task is acknowledged only after it returns
(acks_late) and is handed back if its pool process dies (reject_on_worker_lost); each worker
process reserves one message at a time (prefetch 1), so a long run never holds a second one
hostage. With Redis an unacked message whose worker vanished is handed out again after
``visibility_timeout``; the embedded SQLite broker has no visibility timeout, so the reaper
(worker/reaper.py) covers that case from the runs' heartbeats.
"""

from __future__ import annotations

import os

from celery import Celery, signals
from kombu import Queue

from backend.settings import Settings, broker_url, get_settings
from worker.settings import WorkerSettings


def is_embedded(url: str) -> bool:
    """True for the serverless kombu SQLAlchemy transport (``sqla+sqlite:///...``)."""
    return url.startswith(("sqla+", "sqlalchemy+"))


def configure_embedded_transport(poll_s: float) -> None:
    """The SQLAlchemy transport hands every broker_transport_option to ``create_engine``, so an
    unknown key such as ``polling_interval`` crashes the worker (docs/deploy.md, "The embedded
    broker"); its poll period is a class attribute instead. Default upstream: 1 s between polls
    of an idle queue."""
    from kombu.transport import sqlalchemy as kombu_sqla

    kombu_sqla.Transport.polling_interval = poll_s


UNACKED_MUTEX_EXPIRE_S = 15


def transport_options(url: str, ws: WorkerSettings) -> dict:
    if is_embedded(url):
        return {}
    # A very short visibility timeout makes Redis hand a *live* long run to a second worker;
    # the task's claim guard (worker/claim.py) turns such duplicates into no-ops.
    return {
        "visibility_timeout": ws.visibility_timeout_s,
        "unacked_restore_interval": ws.restore_interval_s,
        "unacked_restore_throttle": 1,  # make restore_interval the sweep period
        # A sweep holds one Redis lock for milliseconds; kombu's default expiry (300 s) meant a
        # worker SIGKILLed (or frozen) while holding it stopped every worker's redelivery for
        # five minutes. Long enough to outlast any sweep, short next to a run.
        "unacked_mutex_expire": UNACKED_MUTEX_EXPIRE_S,
    }


def default_queues(settings: Settings, ws: WorkerSettings) -> list[str]:
    """AERO_WORKER_QUEUES if set, else the CPU queue, plus the GPU queue on a CUDA machine.
    Queue names come from backend settings (AERO_CPU_QUEUE / AERO_GPU_QUEUE, default cpu / gpu)."""
    if ws.queues.strip():
        return [q.strip() for q in ws.queues.split(",") if q.strip()]
    try:
        import torch

        cuda = torch.cuda.is_available()
    except Exception:  # noqa: BLE001  (no torch in this image: serve the CPU queue only)
        cuda = False
    return [settings.cpu_queue, settings.gpu_queue] if cuda else [settings.cpu_queue]


def make_app(settings: Settings | None = None, ws: WorkerSettings | None = None) -> Celery:
    settings, ws = settings or get_settings(), ws or WorkerSettings()
    url = broker_url(settings)
    if is_embedded(url):
        configure_embedded_transport(ws.broker_poll_s)
    app = Celery("aero", broker=url, include=["worker.tasks"])
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_concurrency=ws.concurrency,
        task_queues=[Queue(settings.cpu_queue), Queue(settings.gpu_queue)],
        task_default_queue=settings.cpu_queue,
        task_ignore_result=True,  # results live in the runs table, not a result backend
        task_serializer="json",
        accept_content=["json"],
        broker_transport_options=transport_options(url, ws),
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        # A training task may run for days: never let Celery time it out.
        task_time_limit=None,
        task_soft_time_limit=None,
    )
    return app


@signals.worker_ready.connect
def _bound_the_exit(**_) -> None:
    """The worker's main process (never a pool process, never the API), once its pool exists:
    the guard's exit hook must be registered after multiprocessing's (worker/exit_guard.py)."""
    from worker import exit_guard

    exit_guard.install()


@signals.worker_process_init.connect
def _yield_the_cpu(**_) -> None:
    """Each pool process (the one that trains) lowers its CPU priority to AERO_WORKER_NICE, so the
    API and the store on the same host stay responsive while runs train on its CPUs
    (docs/deploy.md "Worker settings"). Only ever lowered: an unprivileged process cannot raise it."""
    lower_priority(WorkerSettings().nice)


def lower_priority(nice: int) -> int:
    """Set this process's niceness to ``nice`` if that is lower priority than now; return the niceness."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if nice > current:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    return os.getpriority(os.PRIO_PROCESS, 0)


app = make_app()
