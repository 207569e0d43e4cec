"""Worker side of the code sandbox: run candidate programs against tests, isolated.

One candidate = one sandbox process tree, started fresh (nothing persists between
candidates), running :mod:`trainer.tasks.sandbox_harness` as ``python -I -B -c``:

* **Namespaces** (when ``unshare`` works): ``unshare --net --pid --fork --kill-child
  --mount-proc`` (a mount namespace with a private ``/proc`` for the PID namespace: no host
  process, command line or environ is visible); as root also ``--setuid/--setgid <uid>``,
  unprivileged ``-r`` (a user namespace). No network interface is up, so nothing can be
  reached (not even 127.0.0.1), and the harness is PID 1 of its own PID namespace: when it
  exits or is killed, the kernel kills every process the candidate started, even ones that
  left the process group.
* **Without namespaces**: the process runs in a new session (killed as a group); as root the
  uid/gid still drop (Popen ``user``/``group``); the audit hook is forced on.
* **One uid per candidate** (root): each candidate scored at once takes its own uid from the
  operator's range ``run_as_uid .. run_as_uid + uid_count - 1`` (an exclusive ``flock`` per
  uid, so also across worker processes on the host; a candidate waits while all are taken).
  RLIMIT_NPROC is counted per uid, so one candidate's processes cannot starve another's, and
  after each candidate every process of its uid is SIGKILLed (``kill(-1)`` as that uid), in
  both modes: nothing it started outlives it, whatever group or session it moved to.
* **Limits**: RLIMIT_AS (memory), RLIMIT_NPROC (processes, per uid), RLIMIT_CPU and a wall
  clock per test (the harness), RLIMIT_FSIZE and a byte cap on captured stdout, a wall clock
  for the whole candidate here (the process group is SIGKILLed), RLIMIT_NOFILE, no core files.
* **Files and environment**: a fresh temporary directory (owned by the sandbox user, mode
  0700) is the cwd and is removed afterwards; the environment is a fixed minimal dict
  (nothing is inherited from the worker; HOME and TMPDIR are the temporary directory); ``-I``
  ignores PYTHON* variables and user site.
  The interpreter is this process's if the sandbox user can run it, else the system python3.
* **Audit hook** (in each test's process, before candidate code): blocks sockets,
  subprocesses/exec/fork/kill, ctypes, frame and GC introspection, and file writes or path
  changes outside the temporary directory. A second layer, not a security boundary.

Expected outputs of stdio and call-based tests never enter the sandbox: the harness reports
what the program printed or returned and :func:`judge` compares here. Assert-style tests
(MBPP/HumanEval) must run next to the candidate; see docs/tasks.md for what that leaves open.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

HARNESS = Path(__file__).with_name("sandbox_harness.py")
# Worst first: a candidate's outcome is its worst test's (after "passed" and "wrong").
FAILURES = ("timeout", "memory", "output", "blocked", "error")
OUTCOMES = ("passed", "wrong", *FAILURES, "no_code")
SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Limits:
    """Per-candidate limits (``CodeConfig`` in trainer/spec/config.py documents each default; ``network``,
    ``run_as_uid``, ``uid_count`` and ``python`` come from the operator's ``trainer.spec.operator_policy.RunPolicy`` only)."""

    timeout_s: float = 30.0
    test_timeout_s: float = 4.0
    memory_mb: int = 1024
    max_processes: int = 64
    max_output_bytes: int = 1 << 20
    network: Literal["auto", "namespace", "audit"] = "auto"
    audit_hook: Literal["always", "fallback"] = "always"
    run_as_uid: int = 2_000_000_000  # first uid of the sandbox range (root workers)
    uid_count: int = 64  # size of the range: candidates scored at once on this host (more wait)
    python: str | None = None  # interpreter for candidates; None = this one if the sandbox user can run it



@dataclass(frozen=True)
class TestSuite:
    """A problem's tests. ``inputs[i]``: stdin text (stdio), a JSON list of arguments (call) or a
    test script (assert); ``outputs[i]``: expected stdout (stdio) or return value (call)."""

    __test__ = False  # not a pytest class

    kind: Literal["stdio", "call", "assert"]
    inputs: tuple[str, ...]
    outputs: tuple[Any, ...] = ()
    fn_name: str | None = None
    setup: str = ""

    def __len__(self) -> int:
        return len(self.inputs)


@dataclass(frozen=True)
class Result:
    outcome: str  # one of OUTCOMES
    passed: int
    total: int

    @property
    def reward(self) -> float:
        return 1.0 if self.outcome == "passed" else 0.0

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0


# -- comparing -----------------------------------------------------------------------------------


def _is_decimal(token: str) -> bool:
    return any(c in token for c in ".eE") and not token.lstrip("+-").isalpha()


def _token_match(got: str, expected: str) -> bool:
    if got == expected:
        return True
    if not _is_decimal(expected):  # integers and words compare exactly (1000000 != 1000001)
        return False
    try:
        a, b = float(got), float(expected)
    except ValueError:
        return False
    return math.isfinite(a) and math.isfinite(b) and math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)


def outputs_match(got: str, expected: str) -> bool:
    """The stdio rule: both texts split on any whitespace (so trailing spaces, blank lines and
    line breaks vs spaces do not matter) must give the same tokens; a token whose expected
    form is a decimal (has '.', 'e' or 'E') matches within 1e-6 absolute or relative."""
    g, e = got.split(), expected.split()
    return len(g) == len(e) and all(_token_match(a, b) for a, b in zip(g, e))


def _value_match(got: Any, expected: Any) -> bool:
    if isinstance(got, bool) or isinstance(expected, bool):
        return got is expected
    if isinstance(got, (int, float)) and isinstance(expected, (int, float)):
        if isinstance(got, int) and isinstance(expected, int):
            return got == expected
        return math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(_value_match(a, b) for a, b in zip(got, expected))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(_value_match(got[k], expected[k]) for k in got)
    return got == expected


def values_match(got_json: str, expected: Any) -> bool:
    """Call-based rule: the returned value (canonical JSON: tuples are lists) equals the
    expected one, floats within 1e-6 relative; APPS/TACO wrap each expected value in a
    one-element list, so ``[value] == expected`` also passes."""
    got = json.loads(got_json)
    exp = json.loads(json.dumps(expected))
    return _value_match(got, exp) or (isinstance(exp, list) and len(exp) == 1 and _value_match(got, exp[0]))


def judge(tests: TestSuite, records: dict[int, dict], finished: bool) -> Result:
    """Turn the harness's per-test records into a Result. A test passes when it ran to the end
    ("ok") and, for stdio/call, its output matches; tests without a record failed."""
    passed, failures = 0, []
    for i in range(len(tests)):
        rec = records.get(i)
        if rec is None:
            continue
        status = rec.get("status")
        if status != "ok":
            failures.append(status if status in FAILURES else "error")
        elif tests.kind == "assert":
            passed += 1
        elif tests.kind == "stdio":
            passed += outputs_match(str(rec.get("stdout", "")), str(tests.outputs[i]))
        else:
            passed += _safe_values_match(rec.get("value"), tests.outputs[i])
    if passed == len(tests) and finished:
        return Result("passed", passed, len(tests))
    if failures:
        return Result(min(failures, key=FAILURES.index), passed, len(tests))
    return Result("wrong" if finished else "error", passed, len(tests))


def _safe_values_match(value: Any, expected: Any) -> bool:
    try:
        return isinstance(value, str) and values_match(value, expected)
    except (ValueError, TypeError, RecursionError):
        return False


# -- isolation -----------------------------------------------------------------------------------


def _probe(cmd: list[str]) -> bool:
    try:
        return subprocess.run([*cmd, "true"], capture_output=True, timeout=10, env=SANDBOX_ENV).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@lru_cache(maxsize=8)
def namespace_prefix(uid: int) -> tuple[str, ...] | None:
    """The ``unshare`` command line that gives a candidate its own network, PID and mount
    namespaces with a private ``/proc`` (and, as root, drops to ``uid``), or None where
    namespaces are unavailable here. Where only the mount namespace is refused, the network
    and PID namespaces are still used (``/proc`` then shows the host's processes)."""
    exe = shutil.which("unshare")
    if exe is None:
        return None
    for extra in (["--mount-proc"], []):
        base = [exe, "--net", "--pid", "--fork", "--kill-child", *extra]
        cmd = base + ["--setuid", str(uid), "--setgid", str(uid)] if os.geteuid() == 0 else [exe, "-r", *base[1:]]
        if _probe(cmd):
            return tuple(cmd)
    return None


def with_uid(prefix: tuple[str, ...] | None, uid: int) -> tuple[str, ...] | None:
    """``prefix`` (from :func:`namespace_prefix`) dropping to ``uid`` instead."""
    if prefix is None or "--setuid" not in prefix:
        return prefix
    cmd = list(prefix)
    for opt in ("--setuid", "--setgid"):
        cmd[cmd.index(opt) + 1] = str(uid)
    return tuple(cmd)


UID_LOCK_DIR = Path(tempfile.gettempdir()) / "aero-uid-locks"


def _lock_dir() -> Path:
    """A root-owned 0700 directory of one lock file per sandbox uid (refuses one planted by
    someone else)."""
    try:
        os.mkdir(UID_LOCK_DIR, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(UID_LOCK_DIR)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise RuntimeError(f"code sandbox: {UID_LOCK_DIR} is not a private directory of this user")
    return UID_LOCK_DIR


@contextmanager
def uid_slot(base: int, count: int, poll_s: float = 0.02) -> Iterator[int]:
    """Hold one uid of ``base .. base + count - 1`` exclusively (flock: across threads and
    processes of this host) for one candidate; waits while every uid is taken."""
    import fcntl

    d = _lock_dir()
    while True:
        for uid in range(base, base + max(1, count)):
            fd = os.open(d / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            try:
                yield uid
            finally:
                os.close(fd)  # releases the lock
            return
        time.sleep(poll_s)


def kill_uid(uid: int, python: str) -> None:
    """SIGKILL every process of ``uid`` (``kill(-1)`` sent as that uid: atomic against forks),
    then wait (briefly) until none is left. Root only; the uid must be dedicated to the sandbox."""
    kill = shutil.which("kill", path=SANDBOX_ENV["PATH"])
    pykill = [python, "-I", "-S", "-c", "import os; os.kill(-1, 9)"]
    for attempt in range(4):
        cmd = [kill, "-9", "-1"] if kill and attempt % 2 == 0 else pykill  # `kill -9 -1`: procps, util-linux, busybox
        try:
            subprocess.run(cmd, cwd="/", env=SANDBOX_ENV, capture_output=True, timeout=10,
                           user=uid, group=uid, extra_groups=[])
        except (OSError, subprocess.SubprocessError):
            pass
        if not uid_processes(uid):
            return
        time.sleep(0.05)


def uid_processes(uid: int) -> list[int]:
    """Live (not zombie) processes whose real, effective or saved uid is ``uid``."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            status = (d / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        uids = fields.get("Uid", "").split()[:3]
        if str(uid) in uids and not fields.get("State", "").strip().startswith(("Z", "X")):
            found.append(int(d.name))
    return found


def isolation(limits: Limits) -> tuple[tuple[str, ...] | None, bool]:
    """(namespace command prefix or None, audit hook on?). Raises if ``network='namespace'``
    is required but unavailable."""
    prefix = None if limits.network == "audit" else namespace_prefix(limits.run_as_uid)
    if prefix is None and limits.network == "namespace":
        raise RuntimeError("code sandbox: network='namespace' but `unshare --net --pid` does not work here")
    return prefix, prefix is None or limits.audit_hook == "always"


@lru_cache(maxsize=16)
def sandbox_python(requested: str | None, prefix: tuple[str, ...] | None, drop: int | None) -> str:
    """The interpreter candidates run under: ``requested``, else this process's interpreter if
    the sandbox user can execute it (a pyenv/venv under a 0700 /root is not executable by
    nobody), else the system ``python3``. Raises if none starts."""
    user = {} if prefix is not None or drop is None else {"user": drop, "group": drop, "extra_groups": []}
    candidates = [requested] if requested else [sys.executable, shutil.which("python3", path=SANDBOX_ENV["PATH"])]
    for exe in filter(None, candidates):
        try:
            ok = subprocess.run([*(prefix or ()), exe, "-I", "-c", "import json, resource, select"], cwd="/",
                                capture_output=True, timeout=30, env=SANDBOX_ENV, **user).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            return exe
    raise RuntimeError(f"code sandbox: no Python interpreter the sandbox user can run (tried {candidates})")


@lru_cache(maxsize=1)
def _harness_source() -> str:
    return HARNESS.read_text(encoding="utf-8")


def _make_tmp(drop_to: int | None) -> str:
    tmp = tempfile.mkdtemp(prefix="aero-sandbox-")
    if drop_to is not None:
        os.chown(tmp, drop_to, drop_to)
    return tmp


def _remove_tree(path: str) -> None:
    def retry(fn, p, _exc):  # a candidate may have chmod'ed its own files to 000
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            fn(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=retry)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _parse(stdout: bytes | None) -> tuple[dict[int, dict], bool]:
    records, done = {}, False
    for line in (stdout or b"").decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("done"):
            done = True
        elif isinstance(rec.get("i"), int):
            records[rec["i"]] = rec
    return records, done


# -- running -------------------------------------------------------------------------------------


def run_candidate(code: str, tests: TestSuite, limits: Limits = Limits()) -> Result:
    """Run ``code`` against every test in a fresh sandbox; always cleans up its directory and
    processes. ``outcome`` is "passed" only if every test passed."""
    if len(tests) == 0:
        return Result("error", 0, 0)
    prefix, audit = isolation(limits)
    if os.geteuid() != 0:
        return _run(code, tests, limits, prefix, audit, None)
    with uid_slot(limits.run_as_uid, limits.uid_count) as uid:
        return _run(code, tests, limits, with_uid(prefix, uid), audit, uid)


def _run(code: str, tests: TestSuite, limits: Limits, prefix: tuple[str, ...] | None, audit: bool,
         drop: int | None) -> Result:
    user = {} if prefix is not None or drop is None else {"user": drop, "group": drop, "extra_groups": []}
    python = sandbox_python(limits.python, isolation(limits)[0], None if drop is None else limits.run_as_uid)
    tmp = _make_tmp(drop)
    job = {"code": code, "kind": tests.kind, "inputs": list(tests.inputs), "fn_name": tests.fn_name,
           "setup": tests.setup, "audit": audit, "tmp": tmp,
           "limits": {"test_timeout_s": limits.test_timeout_s, "memory_mb": limits.memory_mb,
                      "max_processes": limits.max_processes, "max_output_bytes": limits.max_output_bytes}}
    cmd = [*(prefix or ()), python, "-I", "-B", "-c", _harness_source()]
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                cwd=tmp, env=dict(SANDBOX_ENV, HOME=tmp, TMPDIR=tmp), start_new_session=True, **user)
        try:
            out, _ = proc.communicate(json.dumps(job).encode("utf-8"), timeout=limits.timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired as e:
            out, timed_out = e.stdout, True
        finally:
            _kill_group(proc)  # also on success: nothing the candidate started outlives it
            if drop is not None:
                kill_uid(drop, python)  # processes that left the group (fallback mode) or the dying namespace's
        records, done = _parse(out)
        if timed_out:
            result = judge(tests, records, finished=False)
            return Result("timeout", result.passed, result.total)
        return judge(tests, records, finished=done)
    finally:
        _remove_tree(tmp)


def run_many(jobs: Sequence[tuple[str, TestSuite]], limits: Limits = Limits(), workers: int = 4) -> list[Result]:
    """``run_candidate`` for each ``(code, tests)`` job, ``workers`` sandboxes at a time (threads
    that wait on subprocesses, so the GIL is free). Results in job order."""
    if not jobs:
        return []
    prefix, _ = isolation(limits)  # probe once (cached) before the threads start; raises if required and missing
    sandbox_python(limits.python, prefix, limits.run_as_uid if os.geteuid() == 0 else None)
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs))), thread_name_prefix="aero-sandbox") as ex:
        return list(ex.map(lambda j: run_candidate(j[0], j[1], limits), jobs))
