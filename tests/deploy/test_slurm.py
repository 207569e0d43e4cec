"""scripts/slurm/aero-ray.sbatch under a real Slurm: the test starts its own munged, slurmctld and
two slurmd (Debian's slurmd runs several per host with `-N NODE`), configured in a temp dir with
two fake GPUs per node (gres.conf names /dev/null and /dev/zero), submits the script with sbatch
and reads what the job printed and how it ended.

- check mode (AERO_SLURM_CHECK=1): the job forms one Ray cluster of both Slurm nodes, each
  announcing the GPUs Slurm gave it (--gpus-per-node=2: logical GPUs to Ray), and exits 0;
- worker mode: `aero worker` starts on the head (embedded SQLite broker) with the cluster's
  address, and scancel stops the worker and Ray;
- a node that never joins fails the job after AERO_RAY_WAIT_S, naming that node.

Every job's processes carry a marker in their environment; after each job the test asserts that
none is left (Ray's processes rename themselves, so their command lines say nothing), and kills
any it finds. It never runs `ray stop`: other tests may run Ray on this host at the same time.
The daemons are stopped by their pid files when the module ends, even on failure.

Skipped when Slurm or munge is not installed, failed instead with AERO_REQUIRE_SLURM=1 (CI,
.ci/run). What this cannot show: a real multi-host allocation, NCCL, a shared filesystem
(docs/_slurm_section.md)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from tests.ports import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm" / "aero-ray.sbatch"
VENV = Path(sys.prefix)  # the virtualenv running the tests: it has ray (the dev extra) and aero
NODES = ("n1", "n2")
GPUS_PER_NODE = 2
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "squeue", "scancel")
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
        "DEADLINE"}
JOB_DEADLINE_S = 120


def tail(path: Path, n: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.exists() else f"({path} missing)"


@dataclass
class Cluster:
    dir: Path
    env: dict[str, str]
    pid_files: dict[str, Path] = field(default_factory=dict)  # daemon -> its pid file

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60, check=check)

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
        return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)

    def job(self, job_id: str) -> dict[str, str]:
        out = self.run("scontrol", "show", "job", "-o", job_id, check=False).stdout
        return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{tail(p, 15)}" for p in sorted((self.dir / "log").glob("*.log")))


def missing_tools() -> list[str]:
    missing = [t for t in TOOLS if shutil.which(t, path=SEARCH_PATH) is None]
    return missing + ([] if (VENV / "bin" / "ray").exists() else [f"ray in {VENV} (the dev extra)"])


def slurm_conf(d: Path, ctld_port: int, node_ports: dict[str, int]) -> str:
    host = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    nodes = "\n".join(f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={cpus} "
                      f"RealMemory=1000 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN" for n, port in node_ports.items())
    return f"""ClusterName=aerotest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/socket
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def stop_daemon(pid_file: Path, own: str) -> None:
    """SIGTERM the pid in PID_FILE if its command line names OWN (this test's config), SIGKILL after 15 s."""
    try:
        proc = psutil.Process(int(pid_file.read_text().strip()))
        if own not in " ".join(proc.cmdline()):
            return
        proc.terminate()
        proc.wait(15)
    except (FileNotFoundError, ValueError, psutil.NoSuchProcess):
        return
    except psutil.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    missing = missing_tools()
    if missing:
        why = f"Slurm test needs {', '.join(missing)} (apt-get install slurm-wlm munge; .ci/run installs them)"
        if os.environ.get("AERO_REQUIRE_SLURM") == "1":
            pytest.fail(why + "; AERO_REQUIRE_SLURM=1")
        pytest.skip(why)
    d = tmp_path_factory.mktemp("slurm")
    for sub in ("munge", "state", "log", *(f"spool/{n}" for n in NODES)):
        (d / sub).mkdir(parents=True)
    (d / "munge").chmod(0o700)
    key = d / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    node_ports = {n: free_port() for n in NODES}
    (d / "slurm.conf").write_text(slurm_conf(d, free_port(), node_ports))
    (d / "gres.conf").write_text("".join(f"NodeName={','.join(NODES)} Name=gpu File={dev}\n"
                                         for dev in ("/dev/null", "/dev/zero")[:GPUS_PER_NODE]))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "RAY_")) and k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(PATH=SEARCH_PATH, SLURM_CONF=str(d / "slurm.conf"))
    c = Cluster(d, env, {"munged": d / "munge" / "munged.pid", "slurmctld": d / "slurmctld.pid",
                         **{f"slurmd {n}": d / f"slurmd-{n}.pid" for n in NODES}})
    try:
        c.run("munged", "-f", f"--socket={d}/munge/socket", f"--key-file={key}", f"--pid-file={d}/munge/munged.pid",
              f"--log-file={d}/log/munged.log", f"--seed-file={d}/munge/munged.seed")
        c.run("slurmctld", "-f", str(d / "slurm.conf"))
        for n in NODES:
            c.run("slurmd", "-f", str(d / "slurm.conf"), "-N", n)
        deadline = time.monotonic() + 60
        while set(c.node_states().get(n) for n in NODES) != {"idle"}:
            assert time.monotonic() < deadline, (f"Slurm nodes not idle within 60 s: {c.node_states()} (two slurmd "
                                                 f"on one host need a multiple-slurmd build)\n{c.logs()}")
            time.sleep(0.5)
        yield c
    finally:
        c.run("scancel", "--full", "--user", "root", check=False)
        deadline = time.monotonic() + 60
        while c.run("squeue", "-h", check=False).stdout.strip() and time.monotonic() < deadline:
            time.sleep(0.5)
        for name in ("slurmd n2", "slurmd n1", "slurmctld", "munged"):
            stop_daemon(c.pid_files[name], str(d))


def marked(mark: str) -> list[psutil.Process]:
    """The processes whose environment carries MARK: everything a job started (pytest itself does not)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("AERO_SLURM_TEST_MARK") == mark:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


@dataclass
class Job:
    cluster: Cluster
    id: str
    mark: str
    address: str
    out: Path
    err: Path

    def wait(self, timeout: float = JOB_DEADLINE_S) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while (info := self.cluster.job(self.id)).get("JobState") not in DONE:
            assert time.monotonic() < deadline, f"job {self.id} not done within {timeout} s: {info}\n{self.report()}"
            time.sleep(0.5)
        return info

    def wait_for(self, text: str, timeout: float = JOB_DEADLINE_S) -> None:
        deadline = time.monotonic() + timeout
        while text not in (self.err.read_text(errors="replace") if self.err.exists() else ""):
            info = self.cluster.job(self.id)
            assert info.get("JobState") not in DONE, f"job {self.id} ended before {text!r}: {info}\n{self.report()}"
            assert time.monotonic() < deadline, f"no {text!r} within {timeout} s\n{self.report()}"
            time.sleep(0.5)

    def report(self) -> str:
        return f"--- stdout\n{tail(self.out)}\n--- stderr\n{tail(self.err, 60)}\n{self.cluster.logs()}"

    def assert_nothing_left(self) -> None:
        """The job's processes end with it: the script's trap, then Slurm's own kill of each step."""
        deadline = time.monotonic() + 30
        while (left := marked(self.mark)) and time.monotonic() < deadline:
            time.sleep(0.5)
        names = []
        for proc in left:
            try:
                names.append(f"{proc.pid} {proc.name()}")
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        assert not names, f"processes of job {self.id} still running 30 s after it ended (killed now): {names}"


@pytest.fixture
def submit(cluster, tmp_path):
    ray_dirs: list[str] = []

    def submit(*, venv: Path = VENV, **env: str) -> Job:
        # Ray's Unix sockets live under RAY_TMPDIR and their paths must stay short: /tmp, not tmp_path.
        ray_dirs.append(tempfile.mkdtemp(prefix="aero-ray-", dir="/tmp"))
        mark, port = uuid.uuid4().hex, free_port()
        job_env = {**cluster.env, "AERO_VENV": str(venv), "RAY_PORT": str(port), "RAY_TMPDIR": ray_dirs[-1],
                   "AERO_SLURM_TEST_MARK": mark, **env}
        out, err = tmp_path / f"job{len(ray_dirs)}.out", tmp_path / f"job{len(ray_dirs)}.err"
        proc = subprocess.run(["sbatch", "--parsable", f"--nodes={len(NODES)}", f"--gpus-per-node={GPUS_PER_NODE}",
                               f"--output={out}", f"--error={err}", f"--chdir={tmp_path}", str(SCRIPT)],
                              env=job_env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return Job(cluster, proc.stdout.strip().split(";")[0], mark, f":{port}", out, err)

    yield submit
    for d in ray_dirs:
        shutil.rmtree(d, ignore_errors=True)


def test_the_job_forms_one_ray_cluster_of_every_node_with_slurms_gpus(submit):
    job = submit(AERO_SLURM_CHECK="1")
    info = job.wait()
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), job.report()
    check = json.loads(job.out.read_text().strip())  # stdout is the check's one JSON line, nothing else
    assert check["ray_nodes"] == len(NODES), job.report()
    assert check["gpus"] == {n: GPUS_PER_NODE for n in NODES}  # from SLURM_GPUS_ON_NODE: --gpus-per-node
    assert check["address"].endswith(job.address)
    err = job.err.read_text()
    assert "stopping Ray on n2" in err and "stopping the Ray head on n1" in err and "done (exit 0)" in err
    job.assert_nothing_left()


def host_interface() -> str:
    """The interface holding this host's first address (what the job would pick without a name)."""
    first = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()[0]
    for line in subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout.splitlines():
        parts = line.split()
        if parts[3].split("/")[0] == first:
            return parts[1]
    pytest.skip(f"no interface holds {first}")


def test_the_worker_runs_on_the_head_with_the_address_and_scancel_stops_everything(submit, tmp_path):
    (tmp_path / "data").mkdir()
    iface = host_interface()  # AERO_NET_IFNAME: every node listens there, and the worker's runs get it
    job = submit(AERO_DATA_DIR=str(tmp_path / "data"), AERO_WORKER_ARGS="-c 1", AERO_NET_IFNAME=iface)
    job.wait_for(" ready.")  # celery's "aero@HOST ready."
    workers = [p for p in marked(job.mark) if "celery" in " ".join(p.cmdline())]
    assert workers, job.report()
    worker_env = workers[0].environ()
    assert worker_env["AERO_RAY_ADDRESS"].endswith(job.address)
    assert worker_env["RAY_AUTH_MODE"] == "token" and len(worker_env["RAY_AUTH_TOKEN"]) == 64  # the job's own token
    assert (worker_env["NCCL_SOCKET_IFNAME"], worker_env["GLOO_SOCKET_IFNAME"]) == (iface, iface)
    job.cluster.run("scancel", job.id)
    info = job.wait()
    assert info["JobState"] == "CANCELLED", job.report()
    err = job.err.read_text()
    for step in ("stopping the worker", "stopping Ray on n2", "stopping the Ray head on n1"):
        assert step in err, job.report()
    job.assert_nothing_left()


def test_a_node_that_does_not_join_fails_the_job_naming_it(submit, tmp_path):
    # A virtualenv whose `ray start --address=...` on n2 hangs instead of joining.
    fake = tmp_path / "venv"
    (fake / "bin").mkdir(parents=True)
    for tool in ("python", "aero"):
        (fake / "bin" / tool).write_text(f'#!/bin/sh\nexec {VENV}/bin/{tool} "$@"\n')
    (fake / "bin" / "ray").write_text(
        "#!/bin/bash\n"
        'if [[ "$1" == start && "$SLURMD_NODENAME" == n2 && " $* " == *" --address="* ]]; then\n'
        '    echo "fake ray: not joining" >&2; exec sleep 600\nfi\n'
        f'exec {VENV}/bin/ray "$@"\n')
    for tool in ("python", "aero", "ray"):
        (fake / "bin" / tool).chmod(0o755)
    job = submit(venv=fake, AERO_SLURM_CHECK="1", AERO_RAY_WAIT_S="30")
    info = job.wait()
    assert (info["JobState"], info["ExitCode"]) == ("FAILED", "1:0"), job.report()
    assert job.out.read_text().strip() == ""
    err = job.err.read_text()
    assert "these nodes did not join the Ray cluster within 30s: n2 (joined: n1)" in err, job.report()
    assert "fake ray: not joining" in err and "stopping Ray on n2" in err
    job.assert_nothing_left()  # the hanging `sleep` on n2 included


def test_an_interface_the_nodes_do_not_have_fails_the_job_naming_it(submit):
    job = submit(AERO_SLURM_CHECK="1", AERO_NET_IFNAME="nosuch0")
    info = job.wait()
    assert (info["JobState"], info["ExitCode"]) == ("FAILED", "1:0"), job.report()
    assert "node n1 has no IPv4 address on interface nosuch0 (AERO_NET_IFNAME)" in job.err.read_text(), job.report()
    job.assert_nothing_left()
