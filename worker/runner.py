"""What the ``train_run`` task does, as plain functions (the task itself is one line).

    run = acquire(run_id)                  # claim a queued run, or take over an orphaned one
    cfg = parse_run_config(run.config)     # the config stored at submission
    reconcile_checkpoints(...)             # the store keeps nothing past this host's checkpoint
    run_training(cfg, <data>/runs/<id>, DbSink, should_stop, progress)   # resumes from a checkpoint
    finish(run_id, succeeded | cancelled | failed)

Claiming (who owns a run, fair share, redelivery and takeover) is worker/claim.py. Every write a
worker makes to its run is conditional on still owning it, so a worker that lost its run
(re-queued by the reaper while it was frozen) stops at its next step instead of fighting the new
owner (:class:`RunControl`). Before training, :func:`reconcile_checkpoints` makes the store agree
with the checkpoint this host can resume from.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from sqlalchemy import select
from sqlalchemy.exc import InterfaceError, OperationalError

from backend.db import runs as repo
from backend.db.metrics import delete_steps_after, latest_checkpoint, step_count
from backend.db.models import Run
from backend.db.session import session_scope
from backend.settings import Settings, get_settings
from trainer.spec.config import ConfigError, parse_run_config
from trainer.platform.placement import NodeLost
from trainer.platform.sinks import MultiSink
from worker.alerts import AlertSink, early_stop_outcome
from worker.claim import acquire, worker_identity
from worker.heartbeat import Heartbeat
from worker.ray_head import OWNED_ENV, gpu_claim_issue
from worker.settings import WorkerSettings
from worker.trackers import tracker_sinks
from worker.sink import DbSink

log = logging.getLogger(__name__)

ERROR_TAIL_CHARS = 4000


def terminating() -> bool:
    """Whether this pool process has had its terminate signal (a cold shutdown, SIGTERM).

    billiard's handler answers the signal by raising SystemExit wherever the process is. Raised
    while a weakref callback or a ``__del__`` runs (torch's autograd makes many), Python prints it
    as "Exception ignored" and goes on: the run trained on to its end, or until the supervisor's
    SIGKILL, while the worker's shutdown waited for it. The handler sets a flag before it raises,
    and the run's step-boundary check reads it here."""
    import billiard.common

    fired = getattr(billiard.common, "terminate_handler_fired", None)
    return bool(fired is not None and fired())


# ---------------------------------------------------------------- while it runs


class RunLost(Exception):
    """This process no longer owns its run (the reaper re-queued it, another worker took it)."""


class RunControl:
    """The trainer's ``should_stop`` and ``progress`` callbacks and the heartbeat, for one owned run.

    Cost on the training thread per step: one primary-key read in ``should_stop`` (status,
    owner, cancel flag: cancel is honoured at the next step boundary). ``progress`` only records
    the step and kicks the heartbeat thread, which writes it in the background with
    ``UPDATE runs ... WHERE id = :id AND status = 'running' AND worker = :me`` (a beat that
    proves ownership; ``backend.db.runs.record_progress``). Checkpoints reach the store through
    the sink (``DbSink.on_checkpoint``), announced by the loop.

    A run that is no longer ours (re-queued by the reaper, taken over by another worker) makes
    both callbacks raise :class:`RunLost`: the trainer ends at once, without the checkpoint a
    normal stop writes (the new owner is writing that directory now).
    """

    def __init__(self, url: str, run_id: int, me: str):
        self.url, self.run_id, self.me = url, run_id, me
        self.cancel = self.lost = False
        self.early_stop: Any = None  # the alert (trainer/spec/alerts.py) that asked the run to stop
        self.pending: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.kick: Callable[[], None] = self.beat  # replaced by Heartbeat.kick while training
        self.blocked_s = 0.0  # time the training thread spent in progress/should_stop

    def beat(self) -> None:
        """Heartbeat + latest progress, conditional on owning the run (heartbeat thread)."""
        with self._lock:
            values, self.pending = self.pending, {}
        try:
            with session_scope(self.url) as s:
                cancel = repo.record_progress(s, self.run_id, worker=self.me, **values)
        except Exception:
            # the store refused this beat (a restart, a lock): keep its progress for the next beat,
            # unless a newer step arrived meanwhile; else a run could end with its row a step behind
            with self._lock:
                self.pending = {**values, **self.pending}
            raise
        if cancel is None:
            self.lost = True
        else:
            self.cancel = self.cancel or cancel

    def progress(self, step: int, total: int, metrics: dict) -> None:
        if self.lost:
            raise RunLost(self.run_id)
        with self._lock:
            self.pending = {"step": step, "total_steps": total}
        self.kick()

    def settle(self, step: int | None, total: int) -> None:
        """The trainer's last step, for the final beat. A run resumed from its last checkpoint
        (its worker killed after the last step's checkpoint, before the run was marked) trains no
        step and reports none, so without this it would succeed with its row a step behind."""
        if step is not None:
            with self._lock:
                self.pending = {**self.pending, "step": step, "total_steps": total}

    def should_stop(self) -> bool:
        if terminating():  # the signal's own SystemExit was swallowed (see terminating)
            log.warning("run %s: the worker is shutting down; leaving at this step boundary", self.run_id)
            raise SystemExit(-(256 - signal.SIGTERM))  # the exit billiard's handler would have made
        t0 = time.perf_counter()
        with session_scope(self.url) as s:
            row = s.execute(select(Run.status, Run.worker, Run.cancel_requested).where(Run.id == self.run_id)).first()
        self.blocked_s += time.perf_counter() - t0
        if row is None or row.status != "running" or row.worker != self.me:
            self.lost = True
            raise RunLost(self.run_id)
        self.cancel = self.cancel or bool(row.cancel_requested)
        return self.cancel or self.early_stop is not None

    def waiting(self, text: str | None) -> None:
        """What the run waits for before its first step (its GPUs), or None once placed: recorded
        at once (trainer/platform/placement.py calls this only when the text changes)."""
        self._record(waiting_for=text)

    def placed(self, summary: dict) -> None:
        """Where the run was placed (the Ray cluster, nodes, GPU ids), recorded with its GPU count."""
        log.info("run %s placed: %s", self.run_id, summary)
        self._record(waiting_for=None, placement=summary)

    def _record(self, **values: Any) -> None:
        with session_scope(self.url) as s:
            if not repo.record_placement(s, self.run_id, self.me, **values):
                self.lost = True
                raise RunLost(self.run_id)

    def request_stop(self, alert: Any) -> None:
        """An alert rule asks the run to stop at the next step boundary (worker/alerts.py)."""
        self.early_stop = self.early_stop or alert


# ---------------------------------------------------------------- the whole task


def error_text(exc: BaseException) -> str:
    """The failure as stored: exception line first, then the traceback's tail."""
    tb = "".join(traceback.format_exception(exc))
    head = f"{type(exc).__name__}: {exc}"
    return head + "\n\n" + tb[-ERROR_TAIL_CHARS:]


def _flush_quietly(sink: DbSink) -> None:
    try:
        sink.flush()
    except Exception:  # noqa: BLE001
        log.warning("could not flush buffered metrics", exc_info=True)


def run_dir(settings: Settings, run_id: int) -> Path:
    return settings.runs_dir / str(run_id)


# ---------------------------------------------------------------- before training: the store's checkpoints vs this host's


class MissingCheckpoint(RuntimeError):
    """The store records a checkpoint newer than any this host can load, and the operator's
    AERO_MISSING_CHECKPOINT=fail says not to restart without it."""


def _previous_worker(why: str) -> str | None:
    """The previous owner named by a takeover's reason (``worker.claim.decide``), ``host:pid:start``."""
    m = re.search(r"previous worker (\S+) is gone", why)
    return m.group(1) if m else None


def reconcile_checkpoints(url: str, run: Run, steps: int, out_dir: Path, me: str, why: str, mode: str) -> int:
    """Make the store hold one attempt of ``run`` before it (re)starts here: what this host can
    resume from, the step of ``out_dir``'s checkpoint (0 without one), is where the store's rows
    end. Returns that step.

    A run taken over (or resumed by its user) on a host that does not share the run directory
    finds no checkpoint and starts at step 0, while the store still holds the earlier attempt's
    later steps, evals, rollout samples and checkpoint records, mixed into its curves. When the
    store's newest checkpoint is newer than this host's, ``mode`` (AERO_MISSING_CHECKPOINT)
    decides: ``fail`` raises :class:`MissingCheckpoint` naming the worker that had the run and the
    checkpoint's path; ``restart`` warns, naming the lost checkpoint, and deletes every row after
    this host's step (``backend.db.metrics.delete_steps_after``, as ``DbSink.truncate_after``).
    Rows past this host's step without a newer checkpoint (the earlier attempt died before it
    checkpointed again) are deleted too, quietly. Writes only while ``me`` owns the run."""
    from trainer.platform.local_checkpoint import local_checkpoint_step

    here = local_checkpoint_step(out_dir) or 0
    with session_scope(url) as s:
        stored = latest_checkpoint(s, run.id)
        last = step_count(s, run.id)[1]
    lost = stored if stored is not None and stored.step > here else None
    if lost is None and (last is None or last <= here):
        return here  # nothing stored past what this host resumes from
    if lost is not None:
        prev = _previous_worker(why)
        writer = (f"worker {prev} (host {prev.rsplit(':', 2)[0]})" if prev
                  else "an earlier attempt of this run (the store does not name its worker)")
        found = f"only the checkpoint of step {here}" if here else "no checkpoint"
        what = (f"run {run.id}: the store's newest checkpoint, step {lost.step} at {lost.path}, was written by {writer}, "
                f"but this worker ({me}) finds {found} in its run directory {out_dir}")
        if mode == "fail":
            raise MissingCheckpoint(
                f"{what}. The run directory is not shared between the workers: put AERO_DATA_DIR's runs/ on a "
                f"volume every worker host mounts (docs/deploy.md, 'Run outputs'), then resume the run; or set "
                f"AERO_MISSING_CHECKPOINT=restart to let a worker restart it from its own checkpoint (a multi-node "
                f"run fails here by default: AERO_MISSING_CHECKPOINT=auto)")
        log.warning("%s; restarting from step %d: the store's steps, evals, rollouts and checkpoint records after it "
                    "are deleted (AERO_MISSING_CHECKPOINT=restart; share the run directory across workers to resume "
                    "instead, docs/deploy.md)", what, here)
    else:
        log.info("run %s: dropping the store's steps after %d (this host's checkpoint; stored up to %s)",
                 run.id, here, last)
    with session_scope(url) as s:  # the ownership check first: a lost run deletes nothing
        if repo.record_progress(s, run.id, step=here, total_steps=steps, worker=me) is None:
            raise RunLost(run.id)
        delete_steps_after(s, run.id, here)
    return here


def retry_after_node_loss(settings: Settings, run: Run, me: str, exc: BaseException) -> bool:
    """Re-queue ``run`` after its attempt lost a node (:class:`trainer.platform.placement.NodeLost`) and
    send a new ticket: the next attempt resumes from the last checkpoint on the shared run
    directory, and its placement waits, visibly, until the cluster has the nodes again. The run's
    ``error`` says why while it is queued, and the audit log keeps a ``run.retry`` event per
    attempt. False when the run is no longer this worker's or a cancel arrived (then it fails)."""
    from backend.db import audit
    from backend.queue import enqueue_run

    why = f"attempt {run.attempts} lost a node: {str(exc).splitlines()[0]}"
    with session_scope(settings.database_url) as s:
        if not repo.requeue_retry(s, run.id, me, why):
            return False
        audit.record(s, "run.retry", user=None, role=None, target=f"run:{run.id}",
                     before={"attempt": run.attempts, "worker": me, "error": why}, after={"status": "queued"})
    log.warning("run %s: %s; re-queued for attempt %d", run.id, why, run.attempts + 1)
    try:
        enqueue_run(settings, run.id, run.queue)
    except Exception:  # noqa: BLE001  (a ticket claims the fair pick of its queue, not its own run)
        log.warning("run %s: could not send its retry's ticket now; the next ticket on queue %s claims it",
                    run.id, run.queue, exc_info=True)
    return True


def _send_ticket(settings: Settings, queue: str) -> None:
    """With a running quota, a ticket that found only capped owners' runs did nothing: when a run
    ends (a slot frees), send one more ticket if runs are still queued there (an extra ticket
    finds nothing and does nothing)."""
    from backend.queue import enqueue_run

    try:
        with session_scope(settings.database_url) as s:
            head = s.scalar(select(Run.id).where(Run.queue == queue, Run.status == "queued").order_by(Run.id).limit(1))
        if head is not None:
            enqueue_run(settings, head, queue)
    except Exception:  # noqa: BLE001  (the reaper re-sends nothing here; log it for the operator)
        log.warning("could not send a ticket for queue %s after a run ended", queue, exc_info=True)


STORE_WAIT_S = 300.0  # how long the owner of a run waits for the store to come back before giving up
STORE_RESUMES = 8  # store outages one task resumes its run from (then Celery's retry takes over)


def wait_for_store(url: str, timeout_s: float = STORE_WAIT_S, sleep: Callable[[float], None] = time.sleep) -> bool:
    """Whether the store answers a query within ``timeout_s`` (probed with backoff, 0.5 s to 5 s)."""
    from sqlalchemy import text

    deadline, pause = time.monotonic() + timeout_s, 0.5
    while True:
        try:
            with session_scope(url) as s:
                s.execute(text("SELECT 1"))
            return True
        except (OperationalError, InterfaceError):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            sleep(min(pause, left))
            pause = min(2 * pause, 5.0)


def execute_run(run_id: int, settings: Settings | None = None, ws: WorkerSettings | None = None,
                queue: str | None = None) -> str:
    """Serve the ticket ``run_id`` (the task message's run id; :func:`acquire` picks the run by
    fair share on its queue, or ``queue`` when that run is gone): run (or resume) training and
    record its outcome. Returns the outcome: succeeded | cancelled | failed | lost | skipped: <why>.

    The store unreachable while this process owns the run (mid-training, or recording the
    outcome): wait for it here (:data:`STORE_WAIT_S`) and resume the run from its last checkpoint
    in this process. A Celery retry would go to any worker, and any other one sees this live
    process as the run's owner and drops the delivery, which left the run "running" with no
    trainer until the reaper's stale timeout (found by ``benchmarks/soak/``). A store still down
    after the wait raises: Celery retries the task, and the reaper covers the rest, as before."""
    settings, ws = settings or get_settings(), ws or WorkerSettings()
    url, me = settings.database_url, worker_identity()
    caps = {"running_cap": settings.quota_running_runs, "gpu_cap": settings.quota_running_gpus}
    run, why = acquire(url, run_id, me, ws, queue=queue, **caps)
    if run is None:
        log.info("ticket %s skipped: %s", run_id, why)
        return f"skipped: {why}"
    run_queue = run.queue
    try:
        for resumes in range(STORE_RESUMES + 1):
            try:
                return _train(settings, ws, run, why, me)
            except (OperationalError, InterfaceError):
                if resumes == STORE_RESUMES or not wait_for_store(url):
                    raise
            log.info("run %s: the store answers again; resuming the run in this process", run.id)
            run, why = acquire(url, run_id, me, ws, queue=queue, **caps)
            if run is None:  # the reaper re-queued it meanwhile and another ticket took it
                log.info("ticket %s skipped: %s", run_id, why)
                return f"skipped: {why}"
        raise AssertionError("unreachable")  # the loop returns or raises
    finally:
        if settings.quota_running_runs or settings.quota_running_gpus:
            _send_ticket(settings, run_queue)


def _train(settings: Settings, ws: WorkerSettings, run: Run, why: str, me: str) -> str:
    from trainer.platform.run import run_training  # the engine (torch, verl) loads on first use

    url, run_id = settings.database_url, run.id
    log.info("run %s: %s (attempt %d) as %s", run_id, why, run.attempts, me)
    out_dir = run_dir(settings, run_id)
    control = RunControl(url, run_id, me)
    sink: DbSink | None = None
    alerts: AlertSink | None = None
    try:
        # Defense in depth: the API checked the operator's policy at submit; a config that reached
        # the store some other way (or a policy tightened since) is refused here, before compute.
        policy = settings.run_policy
        cfg = parse_run_config(run.config, policy)
        owned = os.environ.get(OWNED_ENV, "").strip()
        if issue := gpu_claim_issue(cfg, int(owned) if owned.isdigit() else None, me):
            raise ConfigError([issue])  # refused at claim: this worker can never place it
        reconcile_checkpoints(url, run, cfg.steps, out_dir, me, why, ws.missing_checkpoint_mode(cfg.resources.nodes))
        sink = DbSink(url, run_id, owner=me, flush_s=ws.sink_flush_s)
        alerts = AlertSink(url, run_id, run.name, cfg.alerts, policy.webhook_hosts, control.request_stop)
        sinks = MultiSink(sink, alerts, *tracker_sinks(cfg, out_dir, run.name))
        t_train = time.perf_counter()
        with Heartbeat(control.beat, ws.heartbeat_s) as hb:
            control.kick = hb.kick
            summary = run_training(cfg, out_dir, sinks, should_stop=control.should_stop, progress=control.progress,
                                   policy=policy, on_wait=control.waiting, on_placed=control.placed)
        t_train = time.perf_counter() - t_train
    except RunLost:
        log.warning("run %s: lost ownership (re-queued or taken over elsewhere); stopping without writing", run_id)
        return "lost"
    except (OperationalError, InterfaceError):
        # The store, not the run, failed: leave the run running so that this process resumes it
        # from its last checkpoint once the store answers (execute_run), instead of failing it.
        log.warning("run %s: store unreachable while training; resuming once it answers", run_id, exc_info=True)
        raise
    except Exception as exc:  # noqa: BLE001  (any training error, ConfigError included, fails the run)
        log.exception("run %s failed", run_id)
        if sink is not None:
            _flush_quietly(sink)  # the steps done before the error are real data
        if isinstance(exc, NodeLost):  # the cluster's failure, not the run's: retried while attempts last
            if run.attempts < ws.max_attempts and retry_after_node_loss(settings, run, me, exc):
                return "retry"
            exc = NodeLost(f"{exc} (the run lost a node on {run.attempts} attempt(s); AERO_MAX_ATTEMPTS="
                           f"{ws.max_attempts})")
        with session_scope(url) as s:
            ok = repo.mark_failed(s, run_id, error_text(exc), worker=me)
        if ok and alerts is not None:
            alerts.ended("failed", f"{type(exc).__name__}: {exc}")
        return "failed" if ok else "lost"
    control.settle(summary.get("last_step"), cfg.steps)
    control.beat()  # the final progress, fresh flags (the heartbeat thread has stopped)
    if control.lost:
        return "lost"
    status = "cancelled" if summary["status"] == "stopped" else "succeeded"
    error = None
    if status == "cancelled" and control.early_stop is not None and not control.cancel:
        status, error = early_stop_outcome(url, run_id, me, control.early_stop)
    with session_scope(url) as s:
        if error is not None:
            ok = repo.mark_failed(s, run_id, error, worker=me)
        else:
            ok = (repo.mark_cancelled if status == "cancelled" else repo.mark_succeeded)(s, run_id, worker=me)
    if ok and alerts is not None:
        alerts.ended(status, error or "")
    overhead = (sink.blocked_s + control.blocked_s) / max(t_train, 1e-9)
    log.info("run %s %s at step %s in %.1fs; store writes blocked training %.2f%% of it (sink %s, progress %.4fs)",
             run_id, status, summary.get("last_step"), t_train, 100 * overhead, sink.stats(), control.blocked_s)
    return status if ok else "lost"


__all__ = ["RunLost", "RunControl", "error_text", "run_dir", "MissingCheckpoint", "reconcile_checkpoints", "wait_for_store",
           "execute_run"]
