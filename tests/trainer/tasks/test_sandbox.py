"""The code sandbox against hostile candidates: every attack scores 0, lands in the right
outcome counter, leaves no temporary directory and no process behind, and ends within its
limit plus a margin. Real processes, real namespaces (``unshare``) where this machine has them;
the audit-hook fallback is forced with ``network="audit"``."""

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from trainer.tasks.sandbox import (Limits, TestSuite, isolation, judge, namespace_prefix, outputs_match, run_candidate,
                                   run_many, uid_processes, uid_slot, values_match)

pytestmark = pytest.mark.timing  # wall-clock budgets: `make test` runs these one at a time

MARKER = b"Child side of the code sandbox"  # in the harness source, so in every sandbox process's argv
LIMITS = Limits(test_timeout_s=1.0, timeout_s=6.0, memory_mb=512, max_processes=32, max_output_bytes=64 * 1024)
HAS_NS = namespace_prefix(LIMITS.run_as_uid) is not None
ADD = TestSuite("stdio", ("1 2\n", "5 7\n"), ("3", "12"))
needs_ns = pytest.mark.skipif(not HAS_NS, reason="no user/network namespaces here (unshare)")


def sandbox_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("aero-sandbox-*")}


def sandbox_processes() -> list[int]:
    """Live processes whose command line carries the harness source (unshare, harness, test
    children and anything they forked), plus any child of this test process."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0] if (d / "stat").exists() else "X"
        if (MARKER in cmd or ppid == os.getpid()) and state != "Z":
            found.append(int(d.name))
    return found


def run(code, tests=ADD, limits=LIMITS, budget=None):
    """run_candidate plus the invariants every run must keep: no leftovers, bounded time. Only
    processes new since the call count: an earlier test's long-lived child (test_verify.py's
    scorer process) is not this run's leftover, whichever file ran first."""
    before = sandbox_dirs()
    existing = set(sandbox_processes())

    def leftovers() -> set[int]:
        return set(sandbox_processes()) - existing

    t0 = time.monotonic()
    result = run_candidate(code, tests, limits)
    wall = time.monotonic() - t0
    assert wall < (budget if budget is not None else limits.timeout_s) + 3.0, f"took {wall:.1f} s"
    assert sandbox_dirs() <= before, "temporary directory left behind"
    deadline = time.monotonic() + 2.0  # the kernel tears a PID namespace down asynchronously
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not leftovers(), "sandbox process left behind"
    return result, wall


# -- the positive path ------------------------------------------------------------------------


def test_correct_programs_pass_and_partial_credit_is_kept():
    ok, _ = run("a, b = map(int, input().split())\nprint(a + b)")
    assert ok.outcome == "passed" and ok.reward == 1.0 and ok.pass_rate == 1.0
    fd0, _ = run("import sys\nprint(sum(map(int, open(0).read().split())))")  # reads fd 0 directly
    assert fd0.outcome == "passed"
    half, _ = run("print(3)")
    assert half.outcome == "wrong" and half.reward == 0.0 and half.passed == 1 and half.pass_rate == 0.5


def test_call_based_and_assert_tests():
    call = TestSuite("call", ("[1, 2]", "[[1, 2, 3]]"), ([3], 6), fn_name="f")  # APPS wraps outputs in a list
    assert run("def f(*a):\n    return a[0] + a[1] if len(a) == 2 else sum(a[0])", call)[0].outcome == "passed"
    leet = TestSuite("call", ("[2, 3]",), (6,), fn_name="mul")
    assert run("class Solution:\n    def mul(self, a, b):\n        return a * b", leet)[0].outcome == "passed"
    asserts = TestSuite("assert", ("assert add(1, 2) == 3", "assert add(2, 2) == 4"), setup="import math")
    assert run("def add(a, b):\n    return a + b", asserts)[0].outcome == "passed"
    r, _ = run("def add(a, b):\n    return 3", asserts)
    assert (r.outcome, r.passed) == ("error", 1)  # AssertionError in the second test


def test_comparison_rules():
    assert outputs_match("3 \n\n4\n", "3\n4") and outputs_match("1 2 3", "1\n2\n3")
    assert not outputs_match("3", "3\n4") and not outputs_match("1000001", "1000000")
    assert outputs_match("0.3333333", "0.333333333") and not outputs_match("0.34", "0.333333333")
    assert values_match("[1, 2]", (1, 2)) and values_match("3", [3]) and values_match("0.1", 0.1 + 1e-12)
    assert not values_match("true", 1) and not values_match('"3"', 3)


def test_judge_outcome_is_the_worst_failure():
    t = TestSuite("assert", ("a", "b", "c"))
    recs = {0: {"status": "ok"}, 1: {"status": "error"}, 2: {"status": "memory"}}
    assert judge(t, recs, finished=True).outcome == "memory"
    assert judge(t, {0: {"status": "ok"}}, finished=True).outcome == "wrong"  # tests without a record failed
    assert judge(t, {i: {"status": "ok"} for i in range(3)}, finished=False).outcome == "error"


# -- resource attacks -------------------------------------------------------------------------


def test_infinite_loop_is_a_timeout_within_the_test_limit():
    r, wall = run("while True:\n    pass", budget=LIMITS.test_timeout_s)
    assert r.outcome == "timeout" and r.reward == 0.0
    assert wall < LIMITS.test_timeout_s + 2.0  # the remaining test is skipped, not waited for


def test_sleeping_past_the_wall_clock_is_a_timeout():
    r, _ = run("import time\ntime.sleep(60)", budget=LIMITS.test_timeout_s)
    assert r.outcome == "timeout"


def test_whole_candidate_wall_clock_kills_the_sandbox():
    many = TestSuite("stdio", tuple("1 2\n" for _ in range(20)), tuple("3" for _ in range(20)))
    slow = Limits(**{**LIMITS.__dict__, "timeout_s": 1.5, "test_timeout_s": 1.0})
    r, wall = run("import time\ntime.sleep(0.4)\nprint(3)", many, slow, budget=1.5)
    assert r.outcome == "timeout" and 0 < r.passed < 20 and wall < 1.5 + 1.5


def test_fork_bomb_is_blocked_by_the_audit_hook():
    r, _ = run("import os\nwhile True:\n    os.fork()")
    assert (r.outcome, r.reward) == ("blocked", 0.0)


@needs_ns
def test_fork_bomb_without_the_hook_hits_the_process_limit_and_dies_with_the_namespace():
    no_hook = Limits(**{**LIMITS.__dict__, "audit_hook": "fallback"})
    assert isolation(no_hook) == (namespace_prefix(no_hook.run_as_uid), False)
    r, _ = run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", limits=no_hook,
               budget=LIMITS.test_timeout_s)
    assert r.outcome in ("timeout", "error") and r.reward == 0.0  # then run() checks nothing survived
    # the plain bomb: forked copies of the test process must not report for it (their records
    # used to concatenate into an unreadable status, which a stdio test then scored as "wrong")
    r, _ = run("import os\nwhile True:\n    os.fork()", limits=no_hook, budget=LIMITS.test_timeout_s)
    assert r.outcome == "error" and r.reward == 0.0


def test_huge_allocation_is_a_memory_failure():
    assert run("x = bytearray(8 * 2**30)\nprint(3)")[0].outcome == "memory"
    assert run("x = [0] * (4 * 10**9)\nprint(3)")[0].outcome == "memory"


def test_huge_output_is_cut_off():
    r, _ = run("while True:\n    print('x' * 1000)", budget=LIMITS.test_timeout_s)
    assert r.outcome == "output" and r.reward == 0.0
    big_file = "open('big', 'w').write('x' * 10**6)\nprint(3)"  # RLIMIT_FSIZE inside the sandbox dir
    assert run(big_file)[0].outcome == "output"


# -- escape attempts ----------------------------------------------------------------------------


def test_write_outside_the_sandbox_dir_fails(tmp_path):
    target = Path(tempfile.gettempdir()) / f"aero-escape-{os.getpid()}"
    r, _ = run(f"open({str(target)!r}, 'w').write('pwned')\nprint(sum(map(int, input().split())))")
    assert r.outcome == "blocked" and not target.exists()
    own = tmp_path / "planted"  # the worker's own (root, 0700) directory, hook off: the uid drop stops it
    no_hook = Limits(**{**LIMITS.__dict__, "audit_hook": "fallback"})
    if HAS_NS and os.geteuid() == 0:
        r, _ = run(f"open({str(own)!r}, 'w').write('pwned')\nprint(sum(map(int, input().split())))", limits=no_hook)
        assert r.outcome == "error" and not own.exists()


def test_worker_environment_is_not_inherited(monkeypatch):
    secret = "s3cret-" + os.urandom(6).hex()
    monkeypatch.setenv("AERO_TEST_SECRET", secret)
    leak = TestSuite("stdio", ("",), (secret,))
    r, _ = run("import os\nprint(os.environ.get('AERO_TEST_SECRET'))", leak)
    assert r.outcome == "wrong" and r.reward == 0.0
    r, _ = run(f"print(open('/proc/{os.getpid()}/environ').read())", leak)  # the worker's environ via /proc
    assert r.reward == 0.0 and r.outcome == ("error" if os.geteuid() == 0 else r.outcome)


@pytest.mark.skipif(os.geteuid() != 0, reason="file isolation needs the uid drop (root worker)")
def test_worker_file_is_not_readable(tmp_path):
    secret = "file-secret-" + os.urandom(6).hex()
    f = tmp_path / "secret.txt"
    f.write_text(secret)
    f.chmod(0o600)
    r, _ = run(f"print(open({str(f)!r}).read())", TestSuite("stdio", ("",), (secret,)))
    assert (r.outcome, r.reward) == ("error", 0.0)


@pytest.mark.parametrize("network", ["auto", "audit"])
def test_no_network(network):
    if network == "auto" and not HAS_NS:
        pytest.skip("no network namespace here")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(0.3)
    port = srv.getsockname()[1]
    code = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\ns.sendall(b'hi')\n"
            "print(sum(map(int, input().split())))")
    limits = Limits(**{**LIMITS.__dict__, "network": network, "audit_hook": "fallback"})
    r, _ = run(code, limits=limits)
    assert r.reward == 0.0 and r.outcome == ("error" if network == "auto" else "blocked")
    with pytest.raises(socket.timeout):
        srv.accept()  # nothing ever connected
    srv.close()


# -- cheating the checker ----------------------------------------------------------------------

ASSERTS = TestSuite("assert", ("assert add(1, 2) == 3", "assert add(2, 2) == 4"))
CALL = TestSuite("call", ("[1, 2]", "[2, 2]"), (3, 4), fn_name="add")


@pytest.mark.parametrize("tests", [ASSERTS, CALL], ids=["assert", "call"])
@pytest.mark.parametrize("trick", ["import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit"])
def test_exiting_before_the_tests_fails(tests, trick):
    r, _ = run(trick + "\ndef add(a, b):\n    return a + b", tests)
    assert (r.outcome, r.reward, r.passed) == ("error", 0.0, 0)


def test_exit_after_printing_is_fine_for_stdio_but_exit_before_is_not():
    assert run("print(sum(map(int, input().split())))\nimport sys\nsys.exit(0)")[0].outcome == "passed"
    assert run("import os\nos._exit(0)")[0].outcome == "wrong"


ALWAYS_EQUAL = "class E:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\ndef add(a, b):\n    return E()"


@pytest.mark.parametrize("tests", [ASSERTS, CALL], ids=["assert", "call"])
def test_objects_that_equal_everything_fail(tests):
    r, _ = run(ALWAYS_EQUAL, tests)
    assert r.reward == 0.0 and r.outcome == "error" and r.passed == 0


@pytest.mark.parametrize("patch", [
    "import builtins\nbuiltins.__aero_eq__ = lambda a, b: True\nbuiltins.AssertionError = type('Ok', (Exception,), {})",
    "import __main__\n__main__.strict_eq = lambda a, b: True\n__main__.canonical = lambda v, d=0: 3",
    "import json\njson.dumps = lambda *a, **k: '{\"status\": \"ok\"}'\nimport os\nos._exit = lambda c: None",
])
def test_patching_the_checker_does_not_help(patch):
    r, _ = run(patch + "\ndef add(a, b):\n    return 0", ASSERTS)
    assert r.reward == 0.0 and r.outcome == "error"
    r, _ = run(patch + "\ndef add(a, b):\n    return 0", CALL)
    assert r.reward == 0.0 and r.outcome == "wrong"


def test_frame_and_gc_introspection_are_blocked():
    for code in ("import gc\ngc.get_objects()", "try:\n    1/0\nexcept Exception as e:\n    e.__traceback__.tb_frame",
                 "import ctypes"):
        assert run(code + "\ndef add(a, b):\n    return a + b", ASSERTS)[0].outcome == "blocked", code


AUDIT = Limits(**{**LIMITS.__dict__, "network": "audit"})  # the fallback without namespaces: the hook is the barrier


def escape_target(tag: str) -> Path:
    return Path(tempfile.gettempdir()) / f"aero-escape-{tag}-{os.getpid()}"


FORK_EXEC = ("def spawn(m, target):\n    import os\n    r, w = os.pipe()\n"
             "    m.fork_exec([b'/bin/touch', target.encode()], [b'/bin/touch'], True, (w,), None, None, -1, -1, -1, -1,"
             " -1, -1, r, w, True, False, -1, None, None, None, -1, None, False)\n")


@pytest.mark.parametrize("get_module", [
    "import _posixsubprocess as m",
    "import sys\nsys.modules.pop('_posixsubprocess', None)\nimport _posixsubprocess as m",
    "import subprocess, types\nm = types.SimpleNamespace(fork_exec=subprocess._fork_exec)",
    "import _imp, importlib.machinery as im\ns = im.PathFinder.find_spec('_posixsubprocess')\n"  # an extension .so
    "if s is None:\n    m = _imp.create_builtin(im.ModuleSpec('_posixsubprocess', None))\n"  # compiled in
    "else:\n    s.name = 'x._posixsubprocess'\n    m = _imp.create_dynamic(s)",
], ids=["import", "reimport", "via-subprocess", "by-hand"])
def test_posixsubprocess_fork_exec_is_blocked_by_the_audit_hook(get_module):
    target = escape_target("forkexec")
    code = FORK_EXEC + get_module + f"\nspawn(m, {str(target)!r})\nprint(sum(map(int, input().split())))"
    try:
        r, _ = run(code, limits=AUDIT)
        time.sleep(0.2)  # a spawned touch would have run by now
        assert (r.outcome, r.reward) == ("blocked", 0.0) and not target.exists()
    finally:
        target.unlink(missing_ok=True)


@pytest.mark.parametrize("how", ["connect", "attach"])
def test_sqlite_cannot_create_files_outside_the_sandbox_dir(how):
    target = escape_target("sqlite")
    code = ("import sqlite3\n" + (f"c = sqlite3.connect({str(target)!r})\n" if how == "connect" else
            f"c = sqlite3.connect(':memory:')\nc.execute('ATTACH DATABASE ' + repr({str(target)!r}) + ' AS e')\n"
            "c.execute('CREATE TABLE e.t (x)')\n") + "c.execute('CREATE TABLE IF NOT EXISTS t (x)')\nc.commit()\n"
            "print(sum(map(int, input().split())))")
    try:
        r, _ = run(code, limits=AUDIT)
        assert (r.outcome, r.reward) == ("blocked", 0.0) and not target.exists()
    finally:
        target.unlink(missing_ok=True)


def test_mkfifo_and_mknod_are_not_available_to_the_candidate():
    target = escape_target("fifo")
    for make in ("os.mkfifo", "os.mknod", "posix.mkfifo", "[f for f in os.supports_dir_fd if f.__name__ == 'mkfifo'][0]",
                 "__import__('_imp').create_builtin(__import__('importlib.machinery').machinery.ModuleSpec('posix', None))"
                 ".mkfifo"):
        code = f"import os, posix, stat\n({make})({str(target)!r})\nprint(sum(map(int, input().split())))"
        try:
            r, _ = run(code, limits=AUDIT)
            assert r.reward == 0.0 and r.outcome in ("error", "blocked") and not target.exists(), make
        finally:
            target.unlink(missing_ok=True)
    assert run("import subprocess, os\nprint(sum(map(int, input().split())))", limits=AUDIT)[0].outcome == "passed"


def test_candidates_run_in_parallel():
    jobs = [("import time\ntime.sleep(0.5)\nprint(sum(map(int, input().split())))", ADD)] * 4
    t0 = time.monotonic()
    results = run_many(jobs, LIMITS, workers=4)
    assert [r.outcome for r in results] == ["passed"] * 4
    assert time.monotonic() - t0 < 4 * 2 * 0.5  # serial would take >= 4 s (2 tests x 0.5 s each)


# -- leftovers, per-candidate uids, private /proc ---------------------------------------------

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the uid range needs a root worker")
NO_HOOK = Limits(**{**LIMITS.__dict__, "audit_hook": "fallback"})


def range_processes(limits: Limits) -> list[int]:
    return [p for uid in range(limits.run_as_uid, limits.run_as_uid + limits.uid_count) for p in uid_processes(uid)]


def test_concurrent_candidates_hold_distinct_uids():
    with uid_slot(7_000_000, 2) as a, uid_slot(7_000_000, 2) as b:
        assert {a, b} == {7_000_000, 7_000_001}
    with uid_slot(7_000_000, 2) as c:  # released again
        assert c == 7_000_000


@as_root
@needs_ns
def test_daemons_left_by_a_candidate_die_with_it_in_namespace_mode(monkeypatch):
    import trainer.tasks.sandbox as sandbox

    monkeypatch.setattr(sandbox, "kill_uid", lambda uid, python: None)  # the PID namespace's death alone
    code = ("import os\nfor _ in range(5):\n    if os.fork() == 0:\n        os.setsid()\n"
            "        n = os.open('/dev/null', os.O_RDWR)\n        for fd in (0, 1, 2):\n            os.dup2(n, fd)\n"
            "        os.closerange(3, 256)\n        os.execv('/bin/sleep', ['sleep', '300'])\nprint(sum(map(int, input().split())))")
    r, _ = run(code, limits=NO_HOOK)
    assert r.outcome == "passed"
    assert not range_processes(NO_HOOK), "a process of the sandbox uid range outlived its candidate"


@as_root
def test_every_process_of_the_candidate_uid_is_killed_in_fallback_mode():
    audit = Limits(**{**LIMITS.__dict__, "network": "audit", "run_as_uid": 7_100_000, "uid_count": 1})
    # what a candidate that got past the audit hook would leave: a process of its uid in its own session
    left = subprocess.Popen(["sleep", "300"], user=audit.run_as_uid, group=audit.run_as_uid, extra_groups=[],
                            start_new_session=True)
    try:
        assert run_candidate("print(sum(map(int, input().split())))", ADD, audit).outcome == "passed"
        assert left.wait(timeout=5) == -9 and not uid_processes(audit.run_as_uid)
    finally:
        if left.poll() is None:
            left.kill()
            left.wait()


@as_root
@needs_ns
def test_a_candidate_filling_its_process_quota_does_not_starve_another():
    hog = ("import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        break\n"
           "time.sleep(30)")
    good = "import time\ntime.sleep(0.5)\nprint(sum(map(int, input().split())))"
    limits = Limits(**{**NO_HOOK.__dict__, "max_processes": 16, "uid_count": 2})
    results = run_many([(hog, ADD), (good, ADD)], limits, workers=2)
    assert results[0].outcome in ("timeout", "error") and results[1].outcome == "passed"
    deadline = time.monotonic() + 2.0
    while range_processes(limits) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not range_processes(limits)


@needs_ns
def test_candidate_cannot_see_host_command_lines():
    marker = "SECRET-MARKER-" + os.urandom(6).hex()
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", marker])
    try:
        half = len(marker) // 2  # the candidate's own source must not carry the marker
        code = (f"import os\nm = {marker[:half]!r} + {marker[half:]!r}\nseen = []\n"
                "for p in os.listdir('/proc'):\n    if p.isdigit():\n        try:\n"
                "            seen.append(open('/proc/' + p + '/cmdline', 'rb').read())\n        except OSError:\n"
                "            pass\nprint('found' if any(m.encode() in c for c in seen) else 'clean', len(seen) > 0)")
        clean = TestSuite("stdio", ("",), ("clean True",))
        assert run_candidate(code, clean, LIMITS).outcome == "passed"  # namespace mode: a private /proc
        if os.geteuid() == 0:  # the probe itself works: without namespaces the host's /proc shows it
            audit = Limits(**{**LIMITS.__dict__, "network": "audit"})
            assert run_candidate(code, TestSuite("stdio", ("",), ("found True",)), audit).outcome == "passed"
    finally:
        host.kill()
        host.wait()
