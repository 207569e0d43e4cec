"""The worker's exit guard (worker/exit_guard.py): a process whose exit hangs in an earlier
exit hook (as billiard's pool finalizer does on a lock its dead pool process held) leaves after
the grace period, with its remaining children killed; one that exits normally is untouched."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from worker.exit_guard import EXIT_CODE, child_pids, grace_s

ROOT = Path(__file__).resolve().parents[2]

HANGING_EXIT = """
import atexit, subprocess, sys, threading
lock = threading.Lock()
lock.acquire()
atexit.register(lock.acquire)          # registered first, runs last: never returns (the finalizer hang)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
from worker import exit_guard
exit_guard.install(0.5)                 # registered last, runs first: arms the guard
"""


def test_a_hanging_exit_ends_after_the_grace_and_kills_the_children():
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", HANGING_EXIT], cwd=ROOT, capture_output=True, text=True, timeout=30)
    took = time.monotonic() - t0
    assert p.returncode == EXIT_CODE, p.stderr
    assert "still exiting 0.5 s after shutdown" in p.stderr and "killing pool processes" in p.stderr
    assert took < 10  # without the guard it would hang until the timeout
    child = int(p.stdout.split()[0])
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and "Z" not in Path(f"/proc/{child}/stat").read_text().split()[2] \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists() or Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"


def test_a_normal_exit_is_not_delayed_and_keeps_its_code():
    code = "from worker import exit_guard; exit_guard.install(5.0); raise SystemExit(3)"
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert p.returncode == 3 and time.monotonic() - t0 < 4 and "still exiting" not in p.stderr


def test_grace_setting_and_children(monkeypatch):
    monkeypatch.setenv("AERO_WORKER_EXIT_GRACE_S", "2.5")
    assert grace_s() == 2.5
    monkeypatch.setenv("AERO_WORKER_EXIT_GRACE_S", "soon")
    with pytest.raises(ValueError, match="AERO_WORKER_EXIT_GRACE_S"):
        grace_s()
    from backend.db.session import idle_tx_timeout_s  # the same parser, with 0 allowed there

    monkeypatch.setenv("AERO_DB_IDLE_TX_TIMEOUT_S", "0")
    assert idle_tx_timeout_s() == 0.0
    monkeypatch.setenv("AERO_DB_IDLE_TX_TIMEOUT_S", "-1")
    with pytest.raises(ValueError, match=r"AERO_DB_IDLE_TX_TIMEOUT_S='-1'.*>= 0 \(0 = never\)"):
        idle_tx_timeout_s()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in child_pids()
    finally:
        child.kill()
        child.wait()
