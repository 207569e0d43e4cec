"""docker-compose.yml (no Docker engine here): services, ports, env wiring and healthchecks agree
with each other, with docker/Dockerfile, and with the settings the code actually reads; each GPU
worker owns its own GPU. PyYAML's safe loader resolves the anchors and ``<<`` merges as compose
does."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def nvidia_devices(svc: dict) -> list[dict]:
    devices = (((svc.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
    return [d for d in devices if d.get("driver") == "nvidia" or "gpu" in (d.get("capabilities") or [])]


GPU_WORKERS = tuple(name for name, svc in SERVICES.items() if nvidia_devices(svc))
APP_SERVICES = ("api", *GPU_WORKERS, "worker-cpu", "reaper", "dashboard")
WORKERS = (*GPU_WORKERS, "worker-cpu")


def env(name: str) -> dict[str, str]:
    return {k: str(v) for k, v in (SERVICES[name].get("environment") or {}).items()}


def command(name: str) -> list[str]:
    return [str(x) for x in SERVICES[name]["command"]]


def arg(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def container_ports(name: str) -> set[int]:
    return {int(str(p).rsplit(":", 1)[1]) for p in SERVICES[name].get("ports", [])}


def resolve_default(text: str) -> str:
    """Expand ${VAR:-default} to its default, as compose does when VAR is unset."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", text)


def test_services_present():
    assert {"redis", "postgres", "api", "worker-gpu0", "worker-cpu", "dashboard", "reaper"} <= set(SERVICES)


def test_every_service_has_a_healthcheck_and_depends_only_on_healthy_services():
    for name, svc in SERVICES.items():
        assert "healthcheck" in svc and svc["healthcheck"]["test"], name
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in SERVICES and cond["condition"] == "service_healthy", (name, dep)


def test_database_url_points_at_the_postgres_service_with_its_credentials():
    pg = {k: str(v) for k, v in SERVICES["postgres"]["environment"].items()}
    for name in ("api", *WORKERS, "reaper"):
        url = urlsplit(resolve_default(env(name)["DATABASE_URL"]))
        assert url.scheme == "postgresql+psycopg"
        assert (url.hostname, url.port or 5432) == ("postgres", 5432)
        assert url.username == pg["POSTGRES_USER"] and url.path == "/" + pg["POSTGRES_DB"]
        assert url.password == resolve_default(pg["POSTGRES_PASSWORD"])
    assert "pg_isready" in " ".join(SERVICES["postgres"]["healthcheck"]["test"])


def test_redis_url_points_at_the_redis_service():
    for name in ("api", *WORKERS, "reaper"):
        url = urlsplit(env(name)["REDIS_URL"])
        assert (url.scheme, url.hostname, url.port) == ("redis", "redis", 6379)
    # Every process that sends or consumes tasks must see the same broker and store.
    assert len({env(n)["REDIS_URL"] for n in ("api", *WORKERS, "reaper")}) == 1
    assert len({env(n)["DATABASE_URL"] for n in ("api", *WORKERS, "reaper")}) == 1


def test_ports_match_what_the_processes_listen_on():
    api_cmd = command("api")
    assert api_cmd[:3] == ["python", "-m", "backend.serve"] and arg(api_cmd, "--host") == "0.0.0.0"
    assert int(arg(api_cmd, "--workers")) >= 2
    assert container_ports("api") == {int(arg(api_cmd, "--port"))} == {8000}
    dash_cmd = command("dashboard")
    assert dash_cmd[:3] == ["streamlit", "run", "dashboard/app.py"] and arg(dash_cmd, "--server.address") == "0.0.0.0"
    assert container_ports("dashboard") == {int(arg(dash_cmd, "--server.port"))} == {8501}
    # Healthchecks probe those ports; the dashboard reaches the API by service name and port.
    assert "localhost:8000/api/health" in " ".join(SERVICES["api"]["healthcheck"]["test"])
    assert "localhost:8501/_stcore/health" in " ".join(SERVICES["dashboard"]["healthcheck"]["test"])
    api_url = urlsplit(env("dashboard")["AERO_API_URL"])
    assert (api_url.hostname, api_url.port) == ("api", 8000)


def test_api_health_route_exists(tmp_path):
    from backend.main import create_app
    from backend.settings import Settings

    app = create_app(Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path}/x.sqlite"))
    assert "/api/health" in app.openapi()["paths"]


def test_workers_consume_the_queues_the_api_routes_to():
    from backend.settings import Settings

    s = Settings()
    for name in GPU_WORKERS:
        gpu = command(name)
        assert gpu[:4] == ["celery", "-A", "worker.celery_app", "worker"]
        assert set(arg(gpu, "-Q").split(",")) == {s.cpu_queue, s.gpu_queue}
    assert arg(command("worker-cpu"), "-Q") == s.cpu_queue
    assert command("reaper")[:3] == ["python", "-m", "worker.reaper"]
    assert "--alive-file" in command("reaper")
    assert arg(command("reaper"), "--alive-file") in " ".join(SERVICES["reaper"]["healthcheck"]["test"])


def test_workers_stop_with_a_cold_shutdown():
    # SIGQUIT hands the running task's message back to the broker; SIGTERM would wait for the run.
    assert {SERVICES[name]["stop_signal"] for name in WORKERS} == {"SIGQUIT"}


def test_gpu_reservation_on_the_gpu_workers_only():
    for name in GPU_WORKERS:
        devices = nvidia_devices(SERVICES[name])
        assert [(d["driver"], d["capabilities"]) for d in devices] == [("nvidia", ["gpu"])], name
        assert "cu" in resolve_default(SERVICES[name]["build"]["args"]["TORCH_INDEX"])
    for name in ("api", "reaper", "dashboard", "worker-cpu"):
        assert "deploy" not in SERVICES[name], name
        assert SERVICES[name]["build"]["args"]["TORCH_INDEX"] == "cpu"


def test_the_gpu_image_has_the_verl_and_ray_extras():
    """GPU workers run verl and place runs through Ray (docs/scale.md): their image installs those
    extras, named as pyproject.toml names them."""
    import tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert re.search(r'^ARG EXTRAS=""$', (ROOT / "docker" / "Dockerfile").read_text(), re.M)
    for name in GPU_WORKERS:
        wanted = set(resolve_default(SERVICES[name]["build"]["args"]["EXTRAS"]).split(","))
        assert {"verl", "ray"} <= wanted <= extras, (name, wanted)


def gigabytes(size: str) -> float:
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmg]?)b?", size.strip().lower()).groups()
    return float(number) * {"": 1e-9, "k": 1e-6, "m": 1e-3, "g": 1.0}[unit]


def test_workers_have_room_in_shared_memory():
    """Docker gives a container 64 MiB of /dev/shm: too small for Ray's object store, NCCL and
    torch's DataLoader workers. Every worker gets shm_size, at least 1 GB by default."""
    for name in WORKERS:
        assert gigabytes(resolve_default(SERVICES[name]["shm_size"])) >= 1, name


def test_app_services_share_the_image_build_and_data_volume():
    dockerfile = ROOT / SERVICES["api"]["build"]["dockerfile"]
    assert dockerfile.exists()
    text = dockerfile.read_text()
    assert re.search(r'pip install "torch==\$\{TORCH_VERSION\}" --index-url', text)
    assert re.search(r"^ARG TORCH_VERSION=\d+\.\d+\.\d+$", text, re.M) and re.search(r"^ARG TORCH_INDEX=cpu$", text, re.M)
    for name in APP_SERVICES:
        svc = SERVICES[name]
        assert svc["build"]["dockerfile"] == "docker/Dockerfile" and svc["build"]["context"] == "."
        assert set(svc["build"]["args"]) <= set(re.findall(r"^ARG (\w+)", text, re.M))
        assert "aero-data:/data" in svc["volumes"] and env(name)["AERO_DATA_DIR"] == "/data"
    assert set(COMPOSE["volumes"]) >= {"aero-data", "pg-data"}


@pytest.mark.parametrize("name", APP_SERVICES)
def test_every_aero_variable_is_one_the_code_reads(name):
    known = set()
    for path in ("backend/settings.py", "worker/settings.py"):
        known |= set(re.findall(r"\b(AERO_[A-Z_]+|DATABASE_URL|REDIS_URL)\b", (ROOT / path).read_text()))
    known |= {"AERO_API_URL", "AERO_API_TOKEN", "AERO_DASHBOARD_ASK_TOKEN"}  # read by the dashboard and the CLI
    for key in env(name):
        assert key in known, f"{name}: {key} is not read by any settings module"


def test_dashboard_holds_no_token():
    """The compose dashboard listens on 0.0.0.0: no admin token in its environment, and it asks
    each user for theirs (also instead of reading /data/admin.token)."""
    from dashboard.client import token_from_env

    dash = env("dashboard")
    assert "AERO_API_TOKEN" not in dash and dash["AERO_DASHBOARD_ASK_TOKEN"] == "1"
    assert token_from_env({**dash, "AERO_API_TOKEN": "leaked"}) is None


def test_build_context_leaves_out_virtualenvs_and_data():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "aero-data", "**/__pycache__", "*.sqlite"} <= ignored
    assert not any(p.startswith(("trainer", "backend", "worker", "cli", "dashboard")) for p in ignored)  # the code ships


# -- one GPU per GPU worker -------------------------------------------------------------------
# Docker gives a reservation of `count: N` the GPUs 0..N-1, so N replicas of one service (or
# several services with `count`) all get GPU 0. Each GPU worker names its GPU(s) by id instead.


def device_ids(name: str) -> list[str]:
    return [str(i) for d in nvidia_devices(SERVICES[name]) for i in d.get("device_ids") or []]


def queues(name: str) -> set[str]:
    """The queues a worker service consumes: its command's -Q/--queues, else AERO_WORKER_QUEUES."""
    cmd = command(name)
    for flag in ("-Q", "--queues"):
        if flag in cmd:
            return set(resolve_default(arg(cmd, flag)).split(","))
    return set(resolve_default(env(name).get("AERO_WORKER_QUEUES", "")).split(",")) - {""}


def test_there_are_gpu_workers():
    assert len(GPU_WORKERS) >= 2 and "worker-gpu0" in GPU_WORKERS


@pytest.mark.parametrize("name", GPU_WORKERS)
def test_each_gpu_worker_reserves_its_gpus_by_id_not_by_count(name):
    for device in nvidia_devices(SERVICES[name]):
        assert "count" not in device, f"{name}: `count` maps to GPUs 0..N-1 on every replica; name device_ids"
        assert device.get("device_ids"), f"{name}: reserve the GPU by device_ids"
    # literal ids: an interpolated one could make two services take the same GPU
    assert device_ids(name) and all(re.fullmatch(r"\d+", i) for i in device_ids(name)), device_ids(name)


def test_no_gpu_is_reserved_by_two_services():
    owners: dict[str, str] = {}
    for name in GPU_WORKERS:
        for i in device_ids(name):
            assert i not in owners, f"GPU {i} is reserved by both {owners[i]} and {name}"
            owners[i] = name


@pytest.mark.parametrize("name", GPU_WORKERS)
def test_each_gpu_worker_consumes_the_gpu_queue(name):
    from backend.settings import Settings

    assert Settings().gpu_queue in queues(name)
    cmd = command(name)  # its healthcheck pings the Celery node name it runs as
    node = arg(cmd, "--hostname").replace("%h", "$$HOSTNAME")
    assert f"-d {node}" in " ".join(SERVICES[name]["healthcheck"]["test"])


def test_one_gpu_worker_by_default_the_others_by_profile():
    """`docker compose up` on a one-GPU host must not start a worker for a GPU it lacks."""
    default = [n for n in GPU_WORKERS if not SERVICES[n].get("profiles")]
    assert default == ["worker-gpu0"] and device_ids("worker-gpu0") == ["0"]
    for name in GPU_WORKERS:
        if name != "worker-gpu0":
            assert SERVICES[name]["profiles"] == [f"gpu{device_ids(name)[0]}"], name
    assert SERVICES["worker-cpu"]["profiles"] == ["cpu"] and queues("worker-cpu") == {"cpu"}


def test_the_documented_compose_commands_name_services_that_exist():
    """Every `--scale NAME=` and profile in docs/deploy.md and the compose header names a
    service or profile of this file; no GPU worker is scaled above 1 (its replicas would
    share its GPU)."""
    profiles = {p for svc in SERVICES.values() for p in svc.get("profiles") or []}
    for path in ("docs/deploy.md", "docker-compose.yml"):
        text = (ROOT / path).read_text()
        lines = [line for line in text.splitlines() if "docker compose" in line or "COMPOSE_PROFILES" in line]
        assert lines, path
        for line in lines:
            for name, n in re.findall(r"--scale[ =]([\w-]+)=(\d+)", line):
                assert name in SERVICES, (path, line)
                assert name not in GPU_WORKERS or int(n) <= 1, (path, line)
            for p in re.findall(r"--profile[ =]([\w-]+)", line):
                assert p in profiles, (path, line)
            for group in re.findall(r"COMPOSE_PROFILES=([\w,-]+)", line):
                assert set(group.split(",")) <= profiles, (path, line)
