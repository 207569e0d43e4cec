"""`aero up`'s supervisor with real subprocesses: a child killed with SIGKILL is restarted after a
backoff, one that keeps dying makes it give up with a reason; and the dashboard's environment
from the address it listens on (the admin token on loopback only)."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from cli.main import app  # noqa: F401  (registers the command modules first)
from cli.platform_cmds import dashboard_env, is_loopback
from cli.supervisor import Child, Supervisor
from dashboard.client import token_from_env

pytestmark = pytest.mark.timing  # wall-clock budgets: `make test` runs these one at a time

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def _wait(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def sup(tmp_path):
    said: list[str] = []
    s = Supervisor(tmp_path / "logs", backoff_s=0.2, backoff_max_s=1.0, max_restarts_per_min=3, say=said.append)
    s.said = said
    yield s
    s.stop(grace_s=5)


def test_sigkilled_child_is_restarted_after_a_backoff(sup):
    worker = sup.start(Child("worker", SLEEPER))
    api = sup.start(Child("api", SLEEPER))
    assert sup.check() is None
    first = worker.proc.pid
    os.kill(first, signal.SIGKILL)
    assert _wait(lambda: worker.proc.poll() is not None)
    t0 = time.monotonic()
    assert sup.check(t0) is None  # noticed: restart scheduled, not yet done (backoff)
    assert worker.proc.pid == first and worker.restart_at == pytest.approx(t0 + 0.2)
    assert "worker (pid %d) killed by SIGKILL; restarting it in 0.2 s" % first in sup.said[0]
    assert sup.check(t0 + 0.3) is None
    assert worker.proc.pid != first and worker.proc.poll() is None  # a new, live process
    assert api.proc.poll() is None and len(sup.children) == 2  # the others untouched, no duplicate
    assert f"worker restarted (pid {first} -> {worker.proc.pid})" in sup.said[-1]
    assert sup.check() is None


def test_backoff_doubles_and_a_child_that_keeps_dying_gives_up(sup):
    c = sup.start(Child("api", [sys.executable, "-c", "raise SystemExit(3)"]))
    now = time.monotonic()
    delays = []
    for _ in range(3):
        assert _wait(lambda: c.proc.poll() is not None)
        assert sup.check(now) is None
        delays.append(c.restart_at - now)
        now = c.restart_at
        assert sup.check(now) is None  # restarted
    assert delays == pytest.approx([0.2, 0.4, 0.8])
    assert _wait(lambda: c.proc.poll() is not None)
    reason = sup.check(now)
    assert reason and reason.startswith("api exited with 3 and has died 4 times within a minute") and "not restarting" in reason
    assert sup.gave_up is c


def test_restarts_older_than_a_minute_do_not_count(sup):
    c = sup.start(Child("reaper", [sys.executable, "-c", "pass"]))
    c.restarts = [time.monotonic() - 120] * 10  # long ago
    assert _wait(lambda: c.proc.poll() is not None)
    assert sup.check() is None and c.restart_at is not None


def test_sigkill_of_the_leader_ends_its_orphans(sup):
    """A Celery main process killed with SIGKILL leaves its pool; the restart ends that session."""
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    c = sup.start(Child("worker", [sys.executable, "-c", code]))
    assert _wait(lambda: bool(_children(c.proc.pid)))
    [orphan] = _children(c.proc.pid)
    os.kill(c.proc.pid, signal.SIGKILL)
    assert _wait(lambda: c.proc.poll() is not None)
    sup.check()
    assert _wait(lambda: not _alive(orphan))


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------- dashboard environment


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "::1", "localhost", "[::1]"])
def test_loopback_dashboard_gets_the_admin_token(host):
    assert is_loopback(host)
    env, note = dashboard_env(host, "http://127.0.0.1:8000", "ADMIN", {"AERO_DATA_DIR": "/d"})
    assert env["AERO_API_TOKEN"] == "ADMIN" and env["AERO_API_URL"] == "http://127.0.0.1:8000" and env["AERO_DATA_DIR"] == "/d"
    assert note is None and token_from_env(env) == "ADMIN"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "10.0.0.1", "myhost.example"])
def test_non_loopback_dashboard_holds_no_token_and_asks(host, tmp_path):
    assert not is_loopback(host)
    (tmp_path / "admin.token").write_text("ADMIN\n")  # what `aero up` writes in the data dir
    env, note = dashboard_env(host, "http://127.0.0.1:8000", "ADMIN", {"AERO_DATA_DIR": str(tmp_path)})
    assert "ADMIN" not in env.values() and env["AERO_API_TOKEN"] == "" and env["AERO_DASHBOARD_ASK_TOKEN"] == "1"
    assert token_from_env(env) is None  # neither the env nor the admin.token file
    assert note and host in note and "asks each user for an API token" in note
