"""A pool process told to terminate leaves at the next step boundary even when the signal's
SystemExit was swallowed (worker/runner.py ``terminating``), with billiard's real handler."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A pool process's lot after billiard's fork: its terminate handler installed, then "steps" that
# spend nearly all their time inside a weakref callback (as a step inside torch's autograd may
# when the signal lands), each followed by the step-boundary check the run does.
CHILD = """
import sys, time, weakref
import billiard.common
from worker.runner import RunControl

billiard.common.clear_terminate_handler_fired()
billiard.common.reset_signals()
control = RunControl.__new__(RunControl)
control.run_id = 1
if sys.argv[1] == "with-check":
    check = control.should_stop
else:
    check = lambda: None

class Obj:
    pass

print("ready", flush=True)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    obj = Obj()
    ref = weakref.ref(obj, lambda r: time.sleep(0.05))
    del obj
    try:
        check()
    except AttributeError:  # past the terminate check: the store read needs a real run
        pass
print("trained on to the end", flush=True)
sys.exit(3)
"""


def start(mode: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", CHILD, mode], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    p.send_signal(signal.SIGTERM)
    return p


def test_a_swallowed_terminate_signal_still_ends_the_process_at_the_next_step():
    p = start("with-check")
    t0 = time.monotonic()
    _, err = p.communicate(timeout=60)
    assert "Exception ignored" in err and "SystemExit" in err, err  # the signal's own exit was swallowed
    assert "leaving at this step boundary" in err, err
    assert p.returncode == signal.SIGTERM, err  # billiard's exit status: sys.exit(-(256 - 15)) -> 15
    assert time.monotonic() - t0 < 5


def test_without_the_check_the_process_trains_on():
    # The failure the check is for: billiard's handler alone leaves the process running.
    p = start("without")
    try:
        time.sleep(3)
        assert p.poll() is None, p.communicate()[1]
    finally:
        p.kill()
        _, err = p.communicate(timeout=30)
    assert "Exception ignored" in err, err
