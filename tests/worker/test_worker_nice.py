"""Training yields the CPU to the API and the store on a shared host (AERO_WORKER_NICE, default 10,
worker/celery_app.py): a real worker's pool process runs at that niceness, its main process does
not, and a bad value stops the worker with the variable's name. The suite itself runs its workers
at 0 (tests/conftest.py); these tests take the platform's default back."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from tests.worker.conftest import ROOT


def pool_processes(main_pid: int, timeout: float = 30) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = psutil.Process(main_pid).children()
        # a forked pool process runs worker_process_init just after it appears
        if kids and all(k.nice() != 0 for k in kids):
            return kids
        time.sleep(0.2)
    return psutil.Process(main_pid).children()


def test_a_workers_pool_process_runs_at_the_default_niceness(platform, sqlite_url):
    p = platform(sqlite_url, "embedded")
    p.env.pop("AERO_WORKER_NICE")  # the platform's default, not the suite's 0
    w = p.start_worker()
    kids = pool_processes(w.pid)
    assert len(kids) == 1, kids  # -c 1
    assert kids[0].nice() == 10
    assert psutil.Process(w.pid).nice() == 0  # the consumer and its heartbeat keep their priority


def test_the_operator_chooses_the_niceness(platform, sqlite_url):
    p = platform(sqlite_url, "embedded", AERO_WORKER_NICE="3")
    w = p.start_worker()
    assert [k.nice() for k in pool_processes(w.pid)] == [3]


def test_a_bad_niceness_stops_the_worker_naming_the_variable(platform, sqlite_url):
    p = platform(sqlite_url, "embedded", AERO_WORKER_NICE="25")
    argv = [sys.executable, "-m", "celery", "-A", "worker.celery_app", "worker", "-Q", p.queue, "-c", "1"]
    out = subprocess.run(argv, cwd=ROOT, env=p.env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "AERO_WORKER_NICE must be 0-19" in out.stdout + out.stderr


def test_priority_is_only_ever_lowered():
    probe = ("import os; from worker.celery_app import lower_priority; os.setpriority(os.PRIO_PROCESS, 0, 5); "
             "print(lower_priority(2), lower_priority(7))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["5", "7"]
