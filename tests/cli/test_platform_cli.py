"""Platform CLI: request bodies of `aero submit`, and a real `aero up` (embedded broker, SQLite)
that starts the API, a worker, the reaper and the dashboard, submits the demo sweep, trains a
run submitted with `aero submit`, lists it with `aero runs`, accepts a token from
`aero token create`, and stops every child on SIGTERM; the banner and the final "stopped"
line are also tested alone, on a console that is not a terminal."""

from __future__ import annotations

import io
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

from cli.main import app
from cli.platform_cmds import demo_sweep, print_banner, worker_argv
from cli.submit_cmds import submission
from cli.supervisor import Child, Supervisor, shutdown

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_one_method_and_seed_is_one_run():
    path, body = submission(["aero"], [3], {"aero": {"k": 2}, "steps": 10}, "mine", ["t"])
    assert path == "/runs"
    assert body == {"config": {"aero": {"k": 2}, "steps": 10, "method": "aero", "seed": 3}, "tags": ["t"], "name": "mine"}


def test_several_seeds_or_methods_is_a_sweep():
    path, body = submission(["aero"], [0, 1], {"aero": {"k": 2}}, None, [])
    assert path == "/sweeps" and body == {"base": {"aero": {"k": 2}}, "methods": ["aero"], "tags": [], "seeds": [0, 1]}
    path, body = submission(["grpo", "aero"], [], {}, "s", [])
    assert path == "/sweeps" and body == {"base": {}, "methods": ["grpo", "aero"], "tags": [], "name": "s"}


def test_a_priority_goes_into_the_run_or_sweep_body():
    assert submission(["aero"], [], {}, None, [], priority=3)[1] == {"config": {"method": "aero"}, "tags": [], "priority": 3}
    assert submission(["aero", "grpo"], [], {}, None, [], priority=2)[1]["priority"] == 2
    assert "priority" not in submission(["aero"], [], {}, None, [])[1]  # 0: the API's default, not sent


def test_demo_sweep_is_grpo_dapo_aero_on_tiny():
    body = demo_sweep()
    assert body["methods"] == ["grpo", "dapo", "aero"] and body["base"]["preset"] == "tiny" and body["base"]["steps"] == 60


def test_worker_argv_skips_broadcast_features_on_the_embedded_broker():
    assert "--without-mingle" in worker_argv(["cpu"], 1, embedded=True)
    argv = worker_argv(["cpu", "gpu"], 2, embedded=False)
    assert argv[argv.index("-Q") + 1] == "cpu,gpu" and argv[argv.index("--concurrency") + 1] == "2"
    assert "--without-mingle" not in argv


def test_submit_help_names_the_env_vars_and_defaults():
    # Both unset: the help must still read whole (a "[env ...]" hint was eaten as Rich markup).
    res = runner.invoke(app, ["submit", "--help"], env={"COLUMNS": "200", "AERO_API_URL": None, "AERO_API_TOKEN": None})
    assert res.exit_code == 0
    assert "API base URL (env AERO_API_URL; default http://127.0.0.1:8000)." in res.output
    assert "API token (env AERO_API_TOKEN; default <data dir>/admin.token)." in res.output
    assert "URL ." not in res.output and "token ." not in res.output


def piped_console() -> Console:
    """A Console writing to a file, as `aero up`'s stdout is under nohup, a pipe or a log: not a
    terminal, so Rich wraps at 80 columns unless told not to."""
    return Console(file=io.StringIO(), width=80)


def test_banner_keeps_the_token_line_whole_off_a_terminal(tmp_path):
    console = piped_console()
    assert not console.is_terminal
    token = "aero_" + "x" * 43
    token_file = tmp_path / "a-rather-long-data-directory-name" / "admin.token"
    print_banner(console, "http://127.0.0.1:8000", "http://127.0.0.1:8501", token, token_file, tmp_path / "logs")
    lines = console.file.getvalue().splitlines()
    assert f"  token      {token}   (new; saved in {token_file})" in lines
    assert "  dashboard  http://127.0.0.1:8501" in lines and lines[0] == "AERO Lab is up" and lines[-1] == "Ctrl-C to stop."
    assert re.search(r"token\s+(aero_\S+)", "\n".join(lines)).group(1) == token  # what the end-to-end test reads
    console = piped_console()
    print_banner(console, "http://h:1", None, token, None, tmp_path)  # no dashboard, token not new
    text = console.file.getvalue()
    assert "dashboard" not in text and f"  token      {token}\n" in text


def test_shutdown_stops_every_child_and_says_so(tmp_path):
    sup = Supervisor(tmp_path / "logs")
    for name in ("api", "worker"):
        sup.start(Child(name, ["sleep", "60"]))
    console = piped_console()
    shutdown(sup, console)
    assert all(c.proc.poll() is not None for c in sup.children)
    assert console.file.getvalue().splitlines() == ["stopping ...", "AERO Lab stopped (API, worker)"]
    console = piped_console()
    shutdown(Supervisor(tmp_path / "logs"), console)  # failed before starting anything
    assert console.file.getvalue().splitlines()[-1] == "AERO Lab stopped (nothing was running)"


def test_submit_reports_unreachable_api():
    res = runner.invoke(app, ["submit", "--api", "http://127.0.0.1:9", "--token", "x"])
    assert res.exit_code == 1 and "cannot reach the API" in res.output


# ---------------------------------------------------------------- a real `aero up`


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_output(proc, log: Path, pattern: str, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, log.read_text(errors="replace"))
        if m:
            return m
        assert proc.poll() is None, f"aero up exited {proc.returncode}:\n{log.read_text()}"
        time.sleep(0.2)
    raise AssertionError(f"no {pattern!r} within {timeout}s:\n{log.read_text()}")


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_aero_up_end_to_end(tmp_path):
    conftest_env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env = {**conftest_env, "AERO_DATA_DIR": str(tmp_path / "data"), "AERO_BROKER_POLL_S": "0.2", "AERO_HEARTBEAT_S": "1",
           "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    if os.environ.get("AERO_TEST_MODEL_PATH"):  # the operator lets runs read the test model (docs/deploy.md §4)
        env["AERO_DATA_ROOTS"] = os.pathsep.join([str(tmp_path / "data"), os.environ["AERO_TEST_MODEL_PATH"]])
    port, dash_port = _free_port(), _free_port()
    api = f"http://127.0.0.1:{port}"
    has_dashboard = (ROOT / "dashboard" / "app.py").exists()
    log = tmp_path / "up.log"
    with open(log, "w") as f:
        up = subprocess.Popen([sys.executable, "-m", "cli", "up", "--api-port", str(port), "--dashboard-port", str(dash_port),
                               "--demo", "--demo-steps", "2"], cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        token = _wait_output(up, log, r"token\s+(aero_\S+)", 90).group(1)
        _wait_output(up, log, r"demo sweep \d+", 30)
        # The admin token is stored for the dashboard and the CLI, readable by its owner only.
        token_file = tmp_path / "data" / "admin.token"
        assert token_file.read_text().strip() == token
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        children = _children(up.pid)
        assert len(children) == (4 if has_dashboard else 3)  # api, worker, reaper (+ dashboard)
        # The demo sweep is there: GRPO, DAPO, AERO on the tiny preset.
        runs = httpx.get(f"{api}/api/runs", params={"tag": "demo"}).json()["data"]
        assert sorted(r["method"] for r in runs) == ["aero", "dapo", "grpo"]
        for r in runs:  # free the single worker for the run below
            httpx.post(f"{api}/api/runs/{r['id']}/cancel", headers={"Authorization": f"Bearer {token}"})

        # `aero submit` + `aero runs`, over REST, with the token from the data dir.
        sets = ["--set", "steps=3", "--set", "batch_prompts=4", "--set", "n_total=4", "--set", "max_new_tokens=8",
                "--set", "eval_every=0", "--set", "eval_problems=4", "--set", "eval_n=2", "--set", "aero.n_explore=2",
                "--set", "aero.n_max=4", "--set", "aero.k_max=1", "--set", "aero.k=2"]
        if os.environ.get("AERO_TEST_MODEL_PATH"):
            sets += ["--set", "preset=null", "--set", f"model_path={os.environ['AERO_TEST_MODEL_PATH']}"]
        res = _cli("submit", "--api", api, "--method", "aero", "--name", "cli-run", "--tag", "cli", *sets, env=env)
        assert res.returncode == 0, res.stderr
        assert "cli-run" in res.stdout and "queued" in res.stdout
        mine = httpx.get(f"{api}/api/runs", params={"tag": "cli"}).json()["data"][0]
        assert mine["config"]["aero"]["k"] == 2
        res = _cli("submit", "--api", api, "--set", "aero.k=0.5", env=env)  # the API's 422 names the field
        assert res.returncode == 1 and "aero.k" in res.stderr
        rid = mine["id"]
        deadline = time.monotonic() + 120
        while httpx.get(f"{api}/api/runs/{rid}").json()["status"] not in ("succeeded", "failed"):
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        assert httpx.get(f"{api}/api/runs/{rid}").json()["status"] == "succeeded"
        res = _cli("runs", "--api", api, "--status", "succeeded", "--tag", "cli", env=env)
        assert res.returncode == 0 and "cli-run" in res.stdout and "succeeded" in res.stdout and "3/3" in res.stdout
        # `aero compare`: the run as a one-seed group, over /compare/groups
        res = _cli("compare", "--api", api, "--runs", str(rid), env=env)
        assert res.returncode == 0, res.stderr
        assert "aero (baseline)" in res.stdout and "s / step" in res.stdout and "(n=1)" in res.stdout
        assert "Compute to reach AERO's accuracy: no targets (no step-0 evaluation" in res.stdout  # eval_every=0
        res = _cli("compare", "--api", api, "--group", f"{rid},{runs[0]['id']}", env=env)  # differs by more than seed
        assert res.returncode == 1 and "query.groups" in res.stderr and "differ in more than the seed" in res.stderr

        # `aero token create` prints a new token once; it authenticates state-changing calls.
        # `aero up` made the store's admin token, so a token without --role is a member's: it may
        # not change the admin's run; an admin token may.
        res = _cli("token", "create", "ci-bot", env=env)
        member_token = res.stdout.strip()
        assert res.returncode == 0 and member_token.startswith("aero_") and "member token" in res.stderr
        r = httpx.patch(f"{api}/api/runs/{rid}", json={"notes": "no"}, headers={"Authorization": f"Bearer {member_token}"})
        assert r.status_code == 403, r.text
        res = _cli("token", "create", "ci-admin", "--role", "admin", env=env)
        new_token = res.stdout.strip()
        assert res.returncode == 0 and new_token.startswith("aero_") and new_token not in (token, member_token)
        r = httpx.patch(f"{api}/api/runs/{rid}", json={"notes": "ok"}, headers={"Authorization": f"Bearer {new_token}"})
        assert r.status_code == 200 and r.json()["notes"] == "ok"
        assert httpx.patch(f"{api}/api/runs/{rid}", json={"notes": "x"}).status_code == 401
        if has_dashboard:  # started with the API URL and the admin token in its environment
            assert f"dashboard  http://127.0.0.1:{dash_port}" in log.read_text()
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{dash_port}/_stcore/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "dashboard never became healthy"
                time.sleep(0.5)
        else:
            assert "dashboard/app.py not found" in log.read_text()

        # SIGKILL of the worker's main process: `aero up` restarts the worker and stays up.
        def worker_pids() -> list[int]:
            return [p for p in _children(up.pid) if b"celery" in Path(f"/proc/{p}/cmdline").read_bytes()]

        [old] = worker_pids()
        os.kill(old, signal.SIGKILL)
        _wait_output(up, log, rf"worker \(pid {old}\) killed by SIGKILL; restarting it", 20)
        new = int(_wait_output(up, log, rf"worker restarted \(pid {old} -> (\d+)\)", 20).group(1))
        assert new != old and _alive(new) and worker_pids() == [new] and up.poll() is None
        assert httpx.get(f"{api}/api/health").status_code == 200
    finally:
        children = _children(up.pid) if up.poll() is None else []
        t0 = time.monotonic()
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(timeout=60)
        finally:
            stop_s = time.monotonic() - t0
            if up.poll() is None:
                os.killpg(up.pid, signal.SIGKILL)
    assert children and not [c for c in children if _alive(c)], "children left running"
    assert "stopping" in log.read_text()
    stopped = "AERO Lab stopped (API, worker, reaper" + (", dashboard)" if has_dashboard else ")")
    assert log.read_text().rstrip().endswith(stopped)
    print(f"\n[aero up] stopped {len(children)} children in {stop_s:.1f}s")


@pytest.mark.parametrize("args,words", [
    (["--gpus", "0,x"], "GPU ids such as 0,1,2,3"),
    (["--gpus", "1,1"], "names a GPU twice"),
    (["--gpus", "0", "--ray-address", "10.0.0.1:6379"], "not both"),
])
def test_worker_refuses_a_bad_gpu_set_in_one_line_before_starting_anything(args, words):
    r = subprocess.run([sys.executable, "-m", "cli.main", "worker", *args], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])
    said = " ".join((r.stdout + r.stderr).replace("│", " ").split())  # rich's box wraps the message
    assert r.returncode == 2 and words in said and "Traceback" not in r.stderr, r.stderr


def test_a_cluster_in_the_environment_is_joined_like_the_flag():
    """AERO_RAY_ADDRESS alone is the operator's cluster, as --ray-address is: with GPUs in view the
    worker must not start a Ray head of its own (its pool would place runs there, not on the
    cluster), so --gpus beside it is refused as beside the flag."""
    env = {**os.environ, "AERO_RAY_ADDRESS": "10.0.0.1:6379", "CUDA_VISIBLE_DEVICES": "0,1"}
    r = subprocess.run([sys.executable, "-m", "cli.main", "worker", "--gpus", "0"], capture_output=True, text=True,
                       timeout=120, cwd=Path(__file__).resolve().parents[2], env=env)
    said = " ".join((r.stdout + r.stderr).replace("│", " ").split())
    assert r.returncode == 2 and "not both" in said and "Traceback" not in r.stderr, r.stderr


def test_parse_gpus_reads_ids():
    from worker.ray_head import parse_gpus

    assert parse_gpus("0, 2,5") == ["0", "2", "5"] and parse_gpus("") == [] and parse_gpus(None) == []
