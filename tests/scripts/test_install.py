"""The install scripts: `make install` / `make up` install no system packages (the browser is on
the test path only), torch comes from a named index or a local wheel and never from PyPI alone
(where torch==2.13.0 is the multi-GB CUDA build), an unreachable index fails fast saying what
to set, and docker/Dockerfile reads TORCH_INDEX the same way.

The scripts run for real: pip against a local fake torch wheel in a throwaway virtualenv, and
with a stub interpreter or stub system tools where the real ones would download from the
internet or install packages on this machine."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pip
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def make_dry_run(target: str) -> str:
    """The commands `make TARGET` would run on a fresh checkout (-B: as if nothing were built)."""
    return subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def code_lines(path: Path) -> str:
    """A shell script without its comments: what it runs, not what it says."""
    return "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))


# ---------------------------------------------------------------- make targets


def test_make_install_and_up_install_no_browser_and_no_system_packages():
    for target in ("install", "up"):
        commands = make_dry_run(target)
        assert "bash scripts/install.sh" in commands
        assert not re.search(r"apt|chromium|install_browser", commands), (target, commands)
    for script in ("install.sh", "install_torch.sh"):
        assert not re.search(r"apt-get|chromium|sudo", code_lines(SCRIPTS / script)), script
    assert "bash scripts/install_torch.sh" in code_lines(SCRIPTS / "install.sh")


def test_make_test_installs_the_browser_before_the_tests():
    commands = make_dry_run("test").splitlines()
    assert "bash scripts/install_browser.sh" in commands
    pytest_runs = [i for i, c in enumerate(commands) if c.startswith(".venv/bin/python -m pytest -q")]
    assert len(pytest_runs) == 2 and commands.index("bash scripts/install_browser.sh") < pytest_runs[0]
    # the two passes cover every test: the parallel one excludes exactly what the serial one selects
    assert commands[pytest_runs[0]].endswith('-n 2 --maxschedchunk 1 -m "not timing"')
    # (the serial one collects only the files that mark timing tests; collection refuses a timing test elsewhere)
    head, files = commands[pytest_runs[1]].split(" -m timing")
    assert head == ".venv/bin/python -m pytest -q"
    marked = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py") if "mark.timing" in p.read_text())
    assert files.split() == marked and "tests/trainer/tasks/test_sandbox.py" in marked


# ---------------------------------------------------------------- torch: real pip, local wheel


def fake_torch_wheel(folder: Path, version: str = "2.13.0+cpu") -> Path:
    """A minimal valid wheel named torch (a few bytes instead of the real ~200 MB)."""
    dist = f"torch-{version}.dist-info"
    files = {"torch/__init__.py": f"__version__ = {version!r}\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    path = folder / f"torch-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


@pytest.fixture
def bare_venv(tmp_path):
    """A virtualenv with nothing installed; pip runs in it from a folder holding pip alone, so
    what pip installs lands in this venv and nowhere else (a fresh `python -m venv` with pip
    would take seconds per test)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pylib = tmp_path / "pylib"
    pylib.mkdir()
    (pylib / "pip").symlink_to(Path(pip.__file__).parent)
    return venv


def run_install_torch(python: Path | str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    """scripts/install_torch.sh with pip's own configuration ignored: only what the test sets."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "TORCH_"))}
    full = {**base, "PIP_CONFIG_FILE": os.devnull, "PYTHONPATH": str(tmp_path / "pylib"), **env}
    return subprocess.run(["bash", str(SCRIPTS / "install_torch.sh"), str(python)], env=full, capture_output=True,
                          text=True, timeout=120)


def installed_torch(venv: Path) -> list[str]:
    return sorted(p.name for p in venv.glob("lib/python*/site-packages/torch-*.dist-info"))


def test_a_wheel_pip_finds_without_an_index_is_installed_with_no_network(bare_venv, tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    fake_torch_wheel(wheels)
    # No index at all: an attempt to reach one would fail the install.
    res = run_install_torch(bare_venv / "bin" / "python", {"PIP_FIND_LINKS": str(wheels), "PIP_INDEX_URL": "http://127.0.0.1:9/simple"},
                            tmp_path)
    assert res.returncode == 0, res.stderr
    assert "from a local wheel" in res.stderr and "download.pytorch.org" not in res.stderr
    assert installed_torch(bare_venv) == ["torch-2.13.0+cpu.dist-info"]


def test_an_unreachable_index_fails_fast_saying_what_to_set(bare_venv, tmp_path):
    t0 = time.monotonic()
    res = run_install_torch(bare_venv / "bin" / "python", {"TORCH_INDEX": "http://127.0.0.1:9/whl/cpu", "TORCH_TIMEOUT": "3"}, tmp_path)
    assert res.returncode == 1
    assert time.monotonic() - t0 < 60
    msg = res.stderr
    assert "could not get torch==2.13.0 from http://127.0.0.1:9/whl/cpu" in msg
    assert "TORCH_INDEX" in msg and "TORCH_SPEC" in msg
    assert installed_torch(bare_venv) == []


# ---------------------------------------------------------------- torch: which index (stub interpreter)


STUB_PYTHON = """#!/usr/bin/env bash
# `python -m pip ...` as install_torch.sh calls it: log the arguments; a local wheel exists only
# when STUB_LOCAL=1; every index serves one; `install` succeeds.
echo "$*" >> "$STUB_LOG"
dir=""; prev=""
for a in "$@"; do [ "$prev" = -d ] && dir=$a; prev=$a; done
case " $* " in
  *" download "*" --no-index "*) [ "${STUB_LOCAL:-0}" = 1 ] || exit 1 ;;
esac
[ -n "$dir" ] && touch "$dir/torch-2.13.0+stub-py3-none-any.whl"
exit 0
"""


@pytest.fixture
def stub_python(tmp_path):
    path = tmp_path / "python"
    path.write_text(STUB_PYTHON)
    path.chmod(0o755)
    return path


def pip_calls(tmp_path: Path, env: dict[str, str], stub: Path) -> list[str]:
    log = tmp_path / "pip.log"
    log.unlink(missing_ok=True)
    res = run_install_torch(stub, {"STUB_LOG": str(log), **env}, tmp_path)
    assert res.returncode == 0, res.stderr
    return log.read_text().splitlines()


def index_of(calls: list[str]) -> str | None:
    found = [re.search(r"--index-url (\S+)", c) for c in calls]
    return next((m.group(1) for m in found if m), None)


def test_default_is_the_cpu_index_with_a_short_timeout(tmp_path, stub_python):
    calls = pip_calls(tmp_path, {}, stub_python)
    assert "--no-index" in calls[0]  # a local wheel first: none here
    download = calls[1]
    assert f"download -q --no-deps --index-url {CPU_INDEX} --timeout 15 --retries 1" in download
    assert download.endswith("torch==2.13.0")
    assert re.search(r"install -q \S+/torch-2\.13\.0\+stub-py3-none-any\.whl$", calls[2])
    assert len(calls) == 3


def test_a_local_wheel_means_no_index(tmp_path, stub_python):
    calls = pip_calls(tmp_path, {"STUB_LOCAL": "1"}, stub_python)
    assert len(calls) == 2 and "--no-index" in calls[0] and index_of(calls) is None


def test_gpu_machines_name_a_cuda_index_or_a_mirror_and_a_spec(tmp_path, stub_python):
    # An explicit TORCH_INDEX wins over any local wheel.
    calls = pip_calls(tmp_path, {"TORCH_INDEX": "cu128", "TORCH_SPEC": "torch==2.12.0", "STUB_LOCAL": "1"}, stub_python)
    assert index_of(calls) == "https://download.pytorch.org/whl/cu128" and calls[0].endswith("torch==2.12.0")
    assert not any("--no-index" in c for c in calls)
    calls = pip_calls(tmp_path, {"TORCH_INDEX": "https://mirror.example/whl/cpu"}, stub_python)
    assert index_of(calls) == "https://mirror.example/whl/cpu"


def dockerfile_index(torch_index: str) -> str:
    """The index URL docker/Dockerfile's torch RUN line uses for a TORCH_INDEX build argument."""
    text = (ROOT / "docker" / "Dockerfile").read_text()
    run = re.search(r'^RUN (case "\$TORCH_INDEX".*?)(?<!\\)$', text, re.M | re.S).group(1).replace("\\\n", "")
    res = subprocess.run(["sh", "-c", 'pip() { echo "$@"; }; ' + run], env={"TORCH_INDEX": torch_index, "TORCH_VERSION": "2.13.0"},
                         capture_output=True, text=True, check=True)
    return re.search(r"--index-url (\S+)", res.stdout).group(1)


@pytest.mark.parametrize("value", ["cpu", "cu128", "https://mirror.example/whl/cpu"])
def test_dockerfile_and_install_script_read_torch_index_the_same_way(tmp_path, stub_python, value):
    assert dockerfile_index(value) == index_of(pip_calls(tmp_path, {"TORCH_INDEX": value}, stub_python))


# ---------------------------------------------------------------- browser (stub system tools)


def run_install_browser(tmp_path: Path, *, uid: int = 0, system: str = "Linux", apt: bool = True,
                        apt_installs: bool = True, require: bool = False) -> tuple[subprocess.CompletedProcess, list[str]]:
    """scripts/install_browser.sh with PATH holding only stub `uname`, `id` and `apt-get` (which
    logs its arguments and "installs" chromium by creating the file): nothing real is installed."""
    bin_dir, chromium, log = tmp_path / "bin", tmp_path / "chromium", tmp_path / "apt.log"
    bin_dir.mkdir(exist_ok=True)
    stubs = {"uname": f"echo {system}", "id": f"echo {uid}"}
    if apt:
        create = f'[ "$1" = install ] && printf "#!/bin/sh\\n" > "{chromium}" && /bin/chmod +x "{chromium}"' if apt_installs else ":"
        stubs["apt-get"] = f'echo "$*" >> "{log}"; {create}; exit 0'
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {"PATH": str(bin_dir), "AERO_CHROMIUM": str(chromium), **({"AERO_REQUIRE_BROWSER": "1"} if require else {})}
    res = subprocess.run(["/bin/bash", str(SCRIPTS / "install_browser.sh")], env=env, capture_output=True, text=True, timeout=30)
    return res, (log.read_text().splitlines() if log.exists() else [])


def test_browser_installs_without_recommends_as_root(tmp_path):
    res, apt = run_install_browser(tmp_path)
    assert res.returncode == 0 and "will skip" not in res.stderr, res.stderr
    assert apt == ["update -qq", "install -y -qq --no-install-recommends chromium"]
    res, apt = run_install_browser(tmp_path)  # now present: nothing to do
    assert res.returncode == 0 and res.stderr == "" and len(apt) == 2


@pytest.mark.parametrize("why, kw", [("needs root", {"uid": 1000}), ("no apt-get", {"apt": False}),
                                     ("Darwin, not Debian", {"system": "Darwin"}),
                                     ("apt-get installed no", {"apt_installs": False})])
def test_without_a_way_to_install_it_says_how_and_carries_on(tmp_path, why, kw):
    res, apt = run_install_browser(tmp_path, **kw)
    assert res.returncode == 0 and why in res.stderr
    assert "browser tests will skip" in res.stderr and "apt-get install --no-install-recommends chromium" in res.stderr
    if kw.get("apt_installs") is None:
        assert apt == []  # never tried apt-get where it cannot work
    res, _ = run_install_browser(tmp_path, require=True, **kw)  # CI: an error instead
    assert res.returncode == 1
