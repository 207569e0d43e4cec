"""Child side of the code sandbox: runs ONE candidate program against its tests.

This file is stdlib-only and is executed as ``python -I -c <this source>`` inside the
sandbox (see :mod:`trainer.tasks.sandbox`), already as the unprivileged user and, when
available, inside fresh network and PID namespaces. It reads one JSON job from stdin:

    {"code": str, "kind": "stdio" | "call" | "assert", "inputs": [...], "fn_name": str|None,
     "setup": str, "limits": {"test_timeout_s", "memory_mb", "max_processes",
     "max_output_bytes"}, "audit": bool, "tmp": str}

and writes one JSON line per test to stdout, then ``{"done": true}``:

    {"i": int, "status": "ok"|"error"|"timeout"|"memory"|"output"|"blocked",
     "stdout": str (stdio), "value": str (call: canonical JSON), "error": str}

The harness never sees expected outputs for stdio and call-based tests: it reports what the
program printed or returned and the worker compares. Each test runs in a forked child (so a
crash, ``sys.exit`` or ``os._exit`` in one test cannot skip the others' reporting, and
``open(0)`` reads the test's stdin). Candidate code runs only in those children; the child
installs the audit hook before it touches candidate code. Limits: the harness lowers its
own RLIMIT_AS / RLIMIT_NPROC / RLIMIT_NOFILE / RLIMIT_CORE (inherited by the children);
each child also gets RLIMIT_CPU (per test) and RLIMIT_FSIZE (the output cap).
"""

import ast
import builtins
import errno
import json
import os
import resource
import select
import signal
import sys
import time
import types

_PRISTINE_BUILTINS = dict(builtins.__dict__)  # snapshot before any candidate code exists
_BLOCK_PREFIX = "sandbox: blocked "


# -- limits --------------------------------------------------------------------------------------


def _limit(which, value):
    """Lower a resource limit (soft and hard); never raise it above the current hard limit."""
    _, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, value))


def apply_process_limits(limits):
    """Limits the harness and every test child share (the harness sets them on itself)."""
    _limit(resource.RLIMIT_AS, int(limits["memory_mb"]) * 1024 * 1024)
    _limit(resource.RLIMIT_NPROC, int(limits["max_processes"]))
    _limit(resource.RLIMIT_NOFILE, 256)
    _limit(resource.RLIMIT_CORE, 0)


# -- the audit hook (second layer; see docs/tasks.md "Code") ---------------------------------------

_BLOCKED_EVENTS = frozenset({
    "socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.kill", "os.killpg", "pty.spawn", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames", "sys.settrace", "sys.setprofile",
    # a connection can create files anywhere (``connect(path)``, ``ATTACH DATABASE``, ``VACUUM INTO``) with no
    # further audit event, so sqlite3 is refused outright rather than path-checked
    "sqlite3.connect",
})
# Modules a candidate has no business loading; refused on the "import" event, which CPython also
# raises when ``_imp.create_dynamic`` loads an extension module by hand. Matched on the last name
# component and on the file name, so a spec named ``x._posixsubprocess`` does not slip through.
# ``_posixsubprocess.fork_exec`` spawns a process without the "subprocess.Popen" event;
# ``_xxsubinterpreters`` runs code in an interpreter that has none of this interpreter's hooks.
_BLOCKED_IMPORTS = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "_xxsubinterpreters", "_testcapi",
                              "_testinternalcapi", "posix"})  # posix: only a fresh copy (it is always loaded)
# os/posix functions that make filesystem nodes without raising any audit event (CPython 3.11);
# removed from the candidate's view by ``disarm_modules`` (defence in depth, not a boundary)
_UNAUDITED_OS_FUNCS = ("mkfifo", "mknod")
_PATH_EVENTS = frozenset({"os.remove", "os.rmdir", "os.mkdir", "os.rename", "os.chmod", "os.chown", "os.symlink",
                          "os.link", "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "os.removexattr",
                          "os.setxattr"})
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def make_audit_hook(tmp):
    """An audit hook that blocks process creation, sockets, ctypes, sqlite3 connections, the
    imports in ``_BLOCKED_IMPORTS``, frame/GC introspection and any file write or path change
    outside ``tmp``. Blocks raise PermissionError (ImportError for a blocked import, so libraries
    that probe for e.g. ctypes degrade gracefully)."""
    root = os.path.realpath(tmp)
    realpath, fspath, isinstance_, str_, bytes_ = os.path.realpath, os.fspath, isinstance, str, bytes

    def inside(path):
        if isinstance_(path, int):
            return True  # an fd the process already holds
        p = fspath(path)
        p = p.decode() if isinstance_(p, bytes_) else p
        full = realpath(p)
        return full == root or full.startswith(root + os.sep)

    def blocked_import(args):
        names = [args[0]] if isinstance_(args[0], str_) else []
        if len(args) > 1 and isinstance_(args[1], str_):  # the file an extension module is loaded from
            names.append(args[1].rpartition(os.sep)[2].partition(".")[0])
        return any(n.rpartition(".")[2] in _BLOCKED_IMPORTS for n in names)

    def hook(event, args):
        if event in _BLOCKED_EVENTS or event.startswith(("os.exec", "os.spawn", "os.posix_spawn")):
            raise PermissionError(_BLOCK_PREFIX + event)
        if event == "import" and blocked_import(args):
            raise ImportError(_BLOCK_PREFIX + "import " + str_(args[0]))
        if event == "object.__getattr__" and len(args) > 1 and args[1] in _FRAME_ATTRS:
            raise PermissionError(_BLOCK_PREFIX + "access to " + str_(args[1]))
        if event == "open" and args[0] is not None:
            mode, flags = args[1] or "r", args[2] or 0
            writing = any(c in mode for c in "wax+") or bool(flags & _WRITE_FLAGS)
            if writing and not inside(args[0]):
                raise PermissionError(_BLOCK_PREFIX + "write outside the sandbox directory")
        if event in _PATH_EVENTS:
            for a in args:
                if isinstance_(a, (str_, bytes_)) and not inside(a):
                    raise PermissionError(_BLOCK_PREFIX + event + " outside the sandbox directory")

    return hook


def _blocked_fork_exec(*args, **kwargs):
    raise PermissionError(_BLOCK_PREFIX + "_posixsubprocess.fork_exec")


def _blocked_create_builtin(spec):
    raise ImportError(_BLOCK_PREFIX + "import " + str(getattr(spec, "name", "?")) + " (builtin, after start-up)")


def disarm_modules():
    """Before the hook goes in (audit mode): take away what the hook cannot see.

    * ``os.mkfifo`` / ``os.mknod`` raise no audit event, so they are deleted from ``os`` and
      ``posix`` and from the ``os.supports_*`` sets that also reference them. This is defence in
      depth, not a boundary (native code already loaded can still make the system call); the
      dropped uid and the filesystem permissions remain what actually stops such a node.
    * ``_posixsubprocess`` is replaced in ``sys.modules`` by a stub whose ``fork_exec`` is blocked, so
      ``import subprocess`` still works (``Popen`` is blocked by its own event) while the real module
      can only be reached through a fresh import, which the hook refuses. (The harness itself
      never imports ``subprocess``, so no real ``fork_exec`` is loaded in the process.)"""
    posix = sys.modules.get("posix")
    for name in _UNAUDITED_OS_FUNCS:
        for mod in (os, posix):
            fn = getattr(mod, name, None) if mod is not None else None
            if fn is not None:
                delattr(mod, name)
                for group in (os.supports_dir_fd, os.supports_fd, os.supports_effective_ids,
                              os.supports_follow_symlinks):
                    group.discard(fn)
    # Builtin modules (compiled into the interpreter: on Debian's python3 that includes
    # ``_posixsubprocess``) are built by ``_imp.create_builtin``, which raises no audit event.
    # Load every builtin a candidate may use now, then replace ``create_builtin`` so no fresh copy
    # of ``_posixsubprocess`` or ``posix`` (with ``mkfifo``) can be made (the replacement holds no
    # reference to the original, which nothing else references).
    for name in sys.builtin_module_names:
        if name not in sys.modules and name not in _BLOCKED_IMPORTS and name != "spwd":
            try:
                __import__(name)
            except Exception:  # noqa: BLE001 - a builtin that cannot load here is simply not offered
                pass
    imp = sys.modules.get("_imp")
    if imp is not None and hasattr(imp, "create_builtin"):
        imp.create_builtin = _blocked_create_builtin
    stub = types.ModuleType("_posixsubprocess")
    stub.fork_exec = _blocked_fork_exec
    sys.modules["_posixsubprocess"] = stub


# -- values --------------------------------------------------------------------------------------


def canonical(value, depth=0):
    """A JSON-able copy of ``value`` made only of exact built-in types (tuples and sets become
    lists, dict keys strings); anything else (e.g. an object whose ``__eq__`` always returns
    True) raises TypeError, so a return value cannot fake equality."""
    t = type(value)
    if depth > 50:
        raise TypeError("value nested too deeply")
    if value is None or t in (bool, int, str):
        return value
    if t is float:
        return value if value == value and value not in (float("inf"), float("-inf")) else repr(value)
    if t in (list, tuple):
        return [canonical(v, depth + 1) for v in value]
    if t in (set, frozenset):
        return sorted((canonical(v, depth + 1) for v in value), key=repr)
    if t is dict:
        return {str(k): canonical(v, depth + 1) for k, v in value.items()}
    raise TypeError("return value of type " + t.__name__ + " is not a plain value")


def strict_eq(left, right):
    """``left == right`` for assert tests, over plain values only (see ``canonical``); numbers
    of different types compare by value (``3 == 3.0``)."""
    try:
        return canonical(left) == canonical(right)
    except TypeError:
        return False


class _StrictAsserts(ast.NodeTransformer):
    """Rewrites ``assert a == b`` (anywhere in a test script) to ``assert __aero_eq__(a, b)``."""

    def visit_Assert(self, node):
        t = node.test
        if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq):
            call = ast.Call(ast.Name("__aero_eq__", ast.Load()), [t.left, t.comparators[0]], [])
            node.test = ast.copy_location(call, t)
        return node


def compile_test(source):
    tree = _StrictAsserts().visit(ast.parse(source, "<test>"))
    return compile(ast.fix_missing_locations(tree), "<test>", "exec")


# -- one test, in a forked child ------------------------------------------------------------------


def _classify(exc):
    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:  # RLIMIT_FSIZE (Python ignores SIGXFSZ)
        return "output"
    if isinstance(exc, (PermissionError, ImportError)) and str(exc).startswith(_BLOCK_PREFIX):
        return "blocked"
    return "error"


def _run_candidate(job, test):
    """Child body: exec the candidate in a fresh ``__main__`` module, then the test. Returns the
    status record (the caller writes it and ``os._exit``s)."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main  # `import __main__` gives the candidate its own module
    try:
        if job.get("setup"):
            exec(compile(job["setup"], "<setup>", "exec"), main.__dict__)
        exec(compile(job["code"], "<solution>", "exec"), main.__dict__)
        if job["kind"] == "call":
            fn = main.__dict__.get(job["fn_name"])
            if fn is None and "Solution" in main.__dict__:  # LeetCode-style starter code
                fn = getattr(main.__dict__["Solution"](), job["fn_name"])
            if fn is None:
                return {"status": "error", "error": "NameError: " + str(job["fn_name"]) + " is not defined"}
            args = json.loads(test)
            value = fn(*args) if isinstance(args, list) else fn(args)
            return {"status": "ok", "value": json.dumps(canonical(value), sort_keys=True)}
        if job["kind"] == "assert":
            env = dict(main.__dict__)
            env["__builtins__"] = dict(_PRISTINE_BUILTINS)
            env["__aero_eq__"] = strict_eq
            exec(compile_test(test), env)
        sys.stdout.flush()
        return {"status": "ok"}
    except SystemExit as e:
        if job["kind"] == "stdio" and e.code in (None, 0):
            return {"status": "ok"}
        return {"status": "error", "error": "SystemExit: " + str(e.code)}
    except BaseException as e:  # noqa: BLE001 - any failure of candidate code is a failed test
        return {"status": _classify(e), "error": (type(e).__name__ + ": " + str(e))[:300]}


def _child(job, test, stdin_path, out_w, st_w):
    """After fork: rewire fds, set per-test limits, install the hook, run, exit."""
    try:
        limits = job["limits"]
        fd = os.open(stdin_path, os.O_RDONLY) if stdin_path else os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)
        os.dup2(out_w, 1)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.closerange(3, st_w)
        os.closerange(st_w + 1, 1024)
        cpu = max(1, int(float(limits["test_timeout_s"]) + 0.999))
        _limit(resource.RLIMIT_CPU, cpu)
        _limit(resource.RLIMIT_FSIZE, max(1, int(limits["max_output_bytes"])))
        sys.stdin = open(0, "r", encoding="utf-8", errors="replace", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
        write, dumps, exit_, getpid = os.write, json.dumps, os._exit, os.getpid  # bound before candidate code can patch them
        me = getpid()
        if job.get("audit"):  # disarm_modules() already ran in the harness (main)
            sys.addaudithook(make_audit_hook(job["tmp"]))
        record = _run_candidate(job, test)
        if getpid() != me:  # a process the candidate forked (e.g. a fork bomb) returned here: only the test reports
            exit_(0)
        try:
            sys.stdout.flush()
        except BaseException as e:  # noqa: BLE001 - e.g. a stdout that cannot be written
            record = {"status": "output" if isinstance(e, OSError) else "error", "error": type(e).__name__}
        write(st_w, dumps(record).encode())
        exit_(0)
    finally:
        os._exit(0)


def _drain(fds, cap, deadline):
    """Read the child's stdout and status pipes until both close, the deadline passes or
    stdout exceeds ``cap`` bytes. Returns (stdout bytes, status bytes, why-stopped or None)."""
    bufs = {fd: bytearray() for fd in fds}
    open_fds = list(fds)
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            return bufs[fds[0]], bufs[fds[1]], "timeout"
        for fd in select.select(open_fds, [], [], left)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.remove(fd)
                continue
            bufs[fd] += chunk
            if fd == fds[0] and len(bufs[fd]) > cap:
                return bufs[fds[0]], bufs[fds[1]], "output"
            if fd == fds[1] and len(bufs[fd]) > cap + 65536:
                return bufs[fds[0]], bufs[fds[1]], "output"
    return bufs[fds[0]], bufs[fds[1]], None


def run_test(job, i, test):
    """Fork one child for test ``i`` and turn what it did into a report line."""
    limits = job["limits"]
    stdin_path = None
    if job["kind"] == "stdio":
        stdin_path = os.path.join(job["tmp"], ".stdin-%d" % i)
        with open(stdin_path, "w", encoding="utf-8") as f:
            f.write(test)
    out_r, out_w = os.pipe()
    st_r, st_w = os.pipe()
    pid = _fork(time.monotonic() + float(limits["test_timeout_s"]))
    if pid is None:  # the uid's process quota stayed full (e.g. another candidate's fork bomb)
        for fd in (out_r, out_w, st_r, st_w):
            os.close(fd)
        return {"i": i, "status": "error", "error": "could not fork (process limit)"}
    if pid == 0:
        os.close(out_r)
        os.close(st_r)
        _child(job, test, stdin_path, out_w, st_w)
    os.close(out_w)
    os.close(st_w)
    cap = int(limits["max_output_bytes"])
    out, st, stop = _drain([out_r, st_r], cap, time.monotonic() + float(limits["test_timeout_s"]))
    status = _reap(pid, stop, time.monotonic() + float(limits["test_timeout_s"]))
    if status is None:  # closed its pipes but kept running (e.g. sleeping): out of time
        stop, status = "timeout", _reap(pid, "timeout", 0.0)
    os.close(out_r)
    os.close(st_r)
    if stdin_path:
        os.unlink(stdin_path)
    return _report(job, i, out, st, stop, status, cap)


def _fork(deadline):
    """os.fork(), retried while RLIMIT_NPROC is exhausted (EAGAIN), until ``deadline``: the
    quota is per uid, so a fork bomb in a parallel candidate can fill it until it is killed."""
    while True:
        try:
            return os.fork()
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)


def _reap(pid, stop, deadline):
    """The child's wait status: killed at once if ``stop`` is set, else waited for until
    ``deadline`` (None if it is still running then)."""
    if stop is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return os.waitpid(pid, 0)[1]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)


def _report(job, i, out, st, stop, status, cap):
    rec = {"i": i}
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    if stop is not None:
        rec["status"] = stop
    elif sig in (signal.SIGXCPU, signal.SIGKILL):
        rec["status"] = "timeout"  # RLIMIT_CPU: SIGXCPU at the soft limit, SIGKILL at the hard one
    elif sig == signal.SIGXFSZ:
        rec["status"] = "output"
    else:
        try:
            got = json.loads(st.decode("utf-8", "replace"))
            rec.update(status=str(got["status"]), **{k: str(got[k]) for k in ("value", "error") if k in got})
        except (ValueError, TypeError, KeyError):  # no record: os._exit before the end, or a crash (e.g. SIGSEGV)
            rec.update(status="error", error="exited without a result (signal %d)" % sig if sig else
                       "exited without a result")
            if job["kind"] == "stdio" and not sig and os.WEXITSTATUS(status) == 0:
                rec.update(status="ok", error="")  # os._exit(0) after printing: the output decides
    if job["kind"] == "stdio":
        rec["stdout"] = bytes(out[:cap]).decode("utf-8", "replace")
    return rec


# -- main -----------------------------------------------------------------------------------------


def _read_job():
    chunks = []
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    return json.loads(b"".join(chunks).decode("utf-8"))


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    job = _read_job()
    apply_process_limits(job["limits"])
    os.chdir(job["tmp"])
    if job.get("audit"):  # once, before any fork: every test child inherits it
        disarm_modules()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    for i, test in enumerate(job["inputs"]):
        rec = run_test(job, i, test)
        out.write(json.dumps(rec) + "\n")
        if rec["status"] == "timeout":  # the rest would likely time out too: skip them (counted as failed)
            break
    out.write(json.dumps({"done": True}) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
