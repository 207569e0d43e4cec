"""A bounded exit for the worker's main process.

Stopping `aero up` sends the worker SIGQUIT (Celery's cold shutdown): the unfinished run's
message is handed back at once and the run later resumes from its checkpoint. Then the
interpreter exits, and multiprocessing's exit hook runs billiard's pool finalizer
(``Pool._terminate_pool``). About one stop in ten on a loaded 2-core machine (3 in 4 with a
benchmark beside it), that finalizer never returns: ``_set_result_sentinel`` puts on the result
queue and waits for the queue's write lock, and the lock is held by the pool process that was
training, which has already exited while holding it (a process-shared semaphore is not released
when its holder dies). py-spy shows the main thread in ``SemLock.__enter__`` under
``_exit_function``, with no pool process left; the supervisor's SIGKILL after 30 s was the only
way out.

Nothing is left to do at that point, so the guard bounds it: at interpreter exit (an ``atexit``
hook registered once the worker is ready, after multiprocessing's own, which the pool's start
registers, so the guard's runs first) it starts a daemon thread; if the
process is still alive ``AERO_WORKER_EXIT_GRACE_S`` seconds later (default 10; a normal exit
takes well under a second from there), it says so on stderr, SIGKILLs any pool process still
alive and leaves with ``os._exit``. A warm shutdown (SIGTERM) waits for its task before the
interpreter exits, so the guard never cuts a task short.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from pathlib import Path

from common.env import env_seconds

GRACE_ENV = "AERO_WORKER_EXIT_GRACE_S"
EXIT_CODE = 1


def grace_s() -> float:
    return env_seconds(GRACE_ENV, 10)


def child_pids(pid: int | None = None) -> list[int]:
    """The direct children of ``pid`` (this process), from /proc (empty where there is none)."""
    pid = os.getpid() if pid is None else pid
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return sorted(set(out))


def _expire(seconds: float) -> None:
    time.sleep(seconds)
    pids = child_pids()
    sys.stderr.write(f"worker: still exiting {seconds:g} s after shutdown (billiard's pool finalizer is "
                     f"waiting on a lock its dead pool process held); killing pool processes {pids} and exiting\n")
    sys.stderr.flush()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os._exit(EXIT_CODE)


def _arm(seconds: float) -> None:
    threading.Thread(target=_expire, args=(seconds,), name="aero-exit-guard", daemon=True).start()


def install(seconds: float | None = None) -> None:
    """Arm the guard at this process's exit (call it in the worker's main process only)."""
    atexit.register(_arm, grace_s() if seconds is None else seconds)
