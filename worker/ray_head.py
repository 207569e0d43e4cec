"""A worker's own Ray head: the GPUs the operator gives one worker (``aero worker --gpus 0,1,2,3``).

Ray, not Celery, counts GPUs (trainer/platform/placement.py): the worker starts one Ray head that owns
exactly these GPUs, and every pool process places its runs there (``AERO_RAY_ADDRESS``), so
runs of one worker never share a GPU and a run that does not fit waits for one to free. The
head's ``CUDA_VISIBLE_DEVICES`` is the list, so Ray's GPU ids are the host's own; on a host
without CUDA they are logical GPUs (slots Ray hands out, nothing behind them).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from trainer.platform.placement import BUNDLE_CPUS, NO_PRESTART

READY_S = 90.0  # how long the head may take to answer (a busy 2-core host: ~10 s)


def parse_gpus(text: str | None) -> list[str]:
    """``"0,1,2,3"`` -> ["0", "1", "2", "3"]: the host's GPU ids (integers, each once), or [] for none."""
    items = [t.strip() for t in (text or "").split(",") if t.strip()]
    bad = [t for t in items if not t.isdigit()]
    if bad:
        raise ValueError(f"--gpus / AERO_WORKER_GPUS takes GPU ids such as 0,1,2,3; got {text!r}")
    if len(set(items)) < len(items):
        raise ValueError(f"--gpus / AERO_WORKER_GPUS names a GPU twice: {text!r}")
    return items


OWNED_ENV = "AERO_WORKER_OWNED_GPUS"  # how many GPUs a worker without the operator's cluster owns


def visible_gpus(environ: dict[str, str] | None = None, nvml_count=None) -> list[str]:
    """The GPU ids this host lets the worker see: ``CUDA_VISIBLE_DEVICES`` when set (ids or UUIDs;
    empty or ``-1`` = none), else every device NVML counts (``nvml_count``, a callable, for tests),
    else none. Nothing here initialises CUDA: the worker forks its pool after this."""
    env = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in env:
        ids = [t.strip() for t in env["CUDA_VISIBLE_DEVICES"].split(",") if t.strip()]
        return [] if not ids or ids[0].startswith("-") else ids
    try:
        n = (nvml_count or _nvml_count)()
    except Exception:  # noqa: BLE001  (no driver, no nvidia-ml-py: a host without GPUs)
        n = 0
    return [str(i) for i in range(n)]


def _nvml_count() -> int:
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def owned_gpus(flag: str | None, ray_address: str | None, visible: list[str]) -> list[str]:
    """The GPUs a worker's own Ray head owns: ``--gpus`` as given, else, without the operator's
    cluster, every GPU it can see, so that its runs are placed only on real devices and never two
    on one (a Ray per run would declare whatever the run asks). With a cluster: none of its own."""
    owned = parse_gpus(flag)
    if owned or ray_address:
        return owned
    return list(visible)


def ray_installed() -> bool:
    return shutil.which("ray", path=str(Path(sys.executable).parent)) is not None or shutil.which("ray") is not None


def gpu_claim_issue(cfg, owned: int | None, worker: str) -> tuple[str, str] | None:
    """Why this worker can never place ``cfg``, or None. ``owned`` is :data:`OWNED_ENV` (None: the
    worker joined the operator's cluster, which may grow, so nothing is refused here): a worker
    with a head of its own places every run's GPUs there, logical ones included, and one that has
    none can give a CUDA run no GPU at all."""
    from trainer.spec.resources import gpus_held

    if owned is None:
        return None
    need = gpus_held(cfg, cuda=cfg.device == "cuda")
    if owned > 0 and need > owned:
        return ("resources.gpus_per_node", f"the run asks for {need} GPU(s) and worker {worker} owns {owned} (its --gpus, "
                f"or the GPUs it sees) without a cluster: it could never be placed. Ask for at most {owned}, or run it "
                "on a worker with more GPUs or on the operator's Ray cluster (aero worker --ray-address)")
    if owned == 0 and cfg.device == "cuda" and need > 0:
        return ("device", f"the run asks for {need} CUDA GPU(s) and worker {worker} sees none and joins no cluster: "
                "submit it to a GPU worker's queue, or set device=cpu")
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def head_command(gpus: list[str], port: int, cpus: int | None = None) -> list[str]:
    """``ray start --head --block`` owning ``gpus`` (logical CPUs enough for verl's bundles and task
    runners: they are scheduling counters, threads are capped per process)."""
    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray is None:
        raise RuntimeError("a worker with --gpus places runs through Ray: pip install 'aero-lab[ray]'")
    cpus = cpus or max(os.cpu_count() or 1, (BUNDLE_CPUS + 2) * len(gpus), 16)
    return [ray, "start", "--head", "--block", f"--port={port}",
            f"--num-gpus={len(gpus)}", f"--num-cpus={cpus}", "--include-dashboard=false", "--disable-usage-stats"]


def auth_env() -> dict[str, str]:
    """Token authentication with a token of this worker's own, for its head and every process that
    joins it (the worker's pool processes inherit it). Explicit, because Ray 2.60 turns tokens on
    for a head whenever ``~/.ray/auth_token`` exists, and then refuses drivers that do not send it."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(32)}


def start_head(gpus: list[str], port: int | None = None) -> tuple[subprocess.Popen, str]:
    """Start the worker's Ray head (its own process group; authentication from :func:`auth_env`,
    which the caller must pass on to whoever joins) and wait until it answers; returns (process,
    address)."""
    port = port or free_port()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(gpus), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",  # nothing of ours runs on it once the worker stops
           NO_PRESTART[0]: NO_PRESTART[1]}  # no idle Python worker per logical CPU: they start when a run needs them
    env.pop("RAY_ADDRESS", None)
    from ray.util import get_node_ip_address

    proc = subprocess.Popen(head_command(gpus, port), env=env, preexec_fn=_own_group_dies_with_parent)
    ip = get_node_ip_address()
    address = f"{ip}:{port}"  # the address Ray's own nodes and drivers use (the GCS listens there)
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the worker's Ray head exited ({proc.returncode}) before it answered on {address}")
        with socket.socket() as s:
            s.settimeout(1.0)
            if s.connect_ex((ip, port)) == 0:
                return proc, address
        time.sleep(0.5)
    stop_head(proc)
    raise RuntimeError(f"the worker's Ray head did not answer on {address} within {READY_S:.0f} s")


def _own_group_dies_with_parent() -> None:
    """In the head's process, before exec: a process group of its own (signals to the worker's
    group go to Celery, which the worker stops first), and SIGTERM when the worker's process dies,
    however it dies (a SIGKILL included), so a head never outlives its worker."""
    import ctypes

    os.setsid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def stop_head(proc: subprocess.Popen, timeout_s: float = 5.0) -> None:
    """Stop the head and every Ray process it started (its process group): Ray drains a node for up
    to 30 s on SIGTERM, waiting for tasks this worker has already ended, so it gets ``timeout_s``."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    try:  # ray start --block leaves raylet children in the group after its own exit
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_with_head(argv: list[str], gpus: list[str]) -> int:
    """Run the Celery worker ``argv`` with a Ray head of its own owning ``gpus``; the worker's
    pool processes find it in ``AERO_RAY_ADDRESS``. Signals go to the worker; the head stops
    after it."""
    os.environ.update(auth_env())
    head, address = start_head(gpus)
    print(f"aero worker: Ray head at {address} owns GPU(s) {','.join(gpus)}", file=sys.stderr, flush=True)
    child = subprocess.Popen(argv, env={**os.environ, "AERO_RAY_ADDRESS": address, OWNED_ENV: str(len(gpus))})

    def forward(signum, _frame):
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, forward)
    try:
        return child.wait()
    finally:
        stop_head(head)
