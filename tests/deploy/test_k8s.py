"""deploy/k8s (KubeRay) and deploy/skypilot, offline: no Kubernetes cluster, no KubeRay
operator, no Docker, no GPU here.

- Schemas: every Kubernetes object validates against Kubernetes' own JSON schemas (the
  kubernetes-validate package, strict: an unknown field is an error, as `kubectl apply` refuses
  it), the RayCluster against KubeRay's CRD schema (vendored beside this file, with its source),
  and each Ray pod template against Kubernetes' PodTemplate schema too.
- Consistency, as tests/test_compose.py does for docker-compose.yml: Ray announces the GPUs and
  CPUs each pod is given, the operator caps match the cluster, every Ray pod has a memory-backed
  /dev/shm, every pod mounts the one ReadWriteMany volume at AERO_DATA_DIR (/data, as in compose
  and the Dockerfile), the worker runs on the head and joins the head's Service, images, commands,
  environment, ports and health checks agree with compose, Services select their pods.
- Processes: the Ray pods' own commands (the head's and a worker group's, taken from the
  manifest) run here as local processes, the head Service's name replaced by 127.0.0.1, each with
  a Ray temp dir of its own, a pod IP of its own (the host's address for the head, 127.0.0.2 for
  the worker pod) and the environment the manifest gives it; the in-cluster PostgreSQL and Redis
  are replaced by the embedded SQLite store and broker in a temp data dir (the PVC). They form one
  Ray cluster of two nodes, each with the pod's GPUs as logical GPUs; a run submitted to the store trains on the head's worker, its GPU
  held through that cluster; SIGTERM to the head's script (what the kubelet sends) stops the
  worker and Ray. The SkyPilot task's `run` script forms its cluster the same way (two ranks).

Every process the test starts carries a marker in its environment; it kills only those, and
never runs `ray stop` (other tests use Ray on this host)."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import psutil
import pytest
import yaml
from tests.ports import free_port

RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")  # per-node helpers a container's end kills

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SKY = ROOT / "deploy" / "skypilot" / "aero-ray.yaml"
CRD_SCHEMA = Path(__file__).with_name("kuberay_raycluster_v1_schema.yaml")
K8S_VERSION = "1.33"  # the Kubernetes version whose schemas the objects are validated against
VENV = Path(sys.prefix)  # the virtualenv running the tests: ray and aero (the dev extra)
GPU = "nvidia.com/gpu"
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

FILES = sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
OBJECTS = [(p.name, doc) for p in FILES for doc in yaml.safe_load_all(p.read_text()) if doc]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
SKYTASK = yaml.safe_load(SKY.read_text())


def find(kind: str, name: str) -> dict:
    (obj,) = [o for _, o in OBJECTS if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


RAYCLUSTER = find("RayCluster", "aero-ray")
HEAD = RAYCLUSTER["spec"]["headGroupSpec"]
GROUPS = RAYCLUSTER["spec"]["workerGroupSpecs"]
# KubeRay names the head's Service <cluster>-head-svc unless headService.name says otherwise
HEAD_SERVICE = (HEAD.get("headService") or {}).get("metadata", {}).get("name") or f"{RAYCLUSTER['metadata']['name']}-head-svc"
WORKLOADS = {o["metadata"]["name"]: o for _, o in OBJECTS if o["kind"] in ("Deployment", "StatefulSet")}
PLATFORM = ("api", "reaper", "dashboard")  # the Deployments that mirror docker-compose.yml's services


def ray_pods() -> list[tuple[str, dict]]:
    """(name, pod template) of the head and of each worker group."""
    return [("head", HEAD["template"]), *((g["groupName"], g["template"]) for g in GROUPS)]


def ray_container(template: dict) -> dict:
    return template["spec"]["containers"][0]  # KubeRay's Ray container is the first


def script(container: dict) -> str:
    """The shell script a container runs (`bash -c SCRIPT`)."""
    cmd = [*container.get("command", []), *container.get("args", [])]
    assert cmd[:2] == ["/bin/bash", "-c"], cmd
    return [c for c in cmd[2:] if c != "--"][0]


def ray_start(text: str) -> tuple[str, dict[str, str]]:
    """The one `ray start` command of a script: ('head' | 'node', {flag: value})."""
    joined = text.replace("\\\n", " ")
    (line,) = [ln for ln in joined.splitlines() if re.match(r"\s*(?:exec\s+)?ray start\b", ln)]
    words = shlex.split(line.split("ray start", 1)[1].split("&")[0])
    flags = {}
    for w in words:
        key, _, value = w.partition("=")
        flags[key] = value
    return ("head" if "--head" in flags else "node"), flags


def container_env(container: dict, given: dict[str, str] | None = None) -> dict[str, str]:
    """A container's environment as the kubelet builds it: envFrom ConfigMaps, then env in order
    ($(VAR) expanded from what is defined before it); valueFrom entries come from ``given``."""
    env: dict[str, str] = {}
    for src in container.get("envFrom", []):
        env.update({k: str(v) for k, v in find("ConfigMap", src["configMapRef"]["name"])["data"].items()})
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\(([A-Za-z_]\w*)\)", lambda m: env.get(m[1], m[0]), str(e["value"]))
        else:
            env[e["name"]] = (given or {}).get(e["name"], f"<{e['name']}>")
    return env


def gpus(template: dict) -> int:
    return int(ray_container(template)["resources"]["limits"][GPU])


def resolve_default(text: str) -> str:
    """${VAR:-default} -> default, as compose does when VAR is unset."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(text))


# ---------------------------------------------------------------- schemas


def strict(schema):
    """The CRD schema with unknown fields refused: the API server prunes them silently, `kubectl
    apply`'s strict field validation (its default) refuses them."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


CRD_VALIDATOR = jsonschema.Draft7Validator(strict(yaml.load(CRD_SCHEMA.read_text(), Loader=Loader)))


def crd_errors(obj: dict) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in CRD_VALIDATOR.iter_errors(obj)]


def k8s_errors(obj: dict) -> list[str]:
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{'.'.join(map(str, e.path))}: {e.message}"]
    return []


def test_the_kustomization_lists_every_manifest():
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == [p.name for p in FILES]


@pytest.mark.parametrize("obj", [pytest.param(o, id=f"{f}:{o['kind']}/{o['metadata']['name']}") for f, o in OBJECTS
                                 if o["apiVersion"] != "ray.io/v1"])
def test_every_kubernetes_object_validates_against_the_kubernetes_schema(obj):
    assert k8s_errors(obj) == []


def test_the_raycluster_validates_against_the_kuberay_crd():
    assert RAYCLUSTER["apiVersion"] == "ray.io/v1"
    assert crd_errors(RAYCLUSTER) == []
    # its metadata and every pod template against Kubernetes' own schemas, which the CRD copies
    assert k8s_errors({"apiVersion": "v1", "kind": "ConfigMap", "metadata": RAYCLUSTER["metadata"]}) == []
    for group, template in ray_pods():
        pt = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": group}, "template": template}
        assert k8s_errors(pt) == [], group


def test_the_schema_checks_find_what_they_look_for():
    bad = copy.deepcopy(RAYCLUSTER)
    bad["spec"]["workerGroupSpecs"][0]["replicas"] = "one"
    bad["spec"]["headGroupSpec"]["bogus"] = 1
    del bad["spec"]["workerGroupSpecs"][0]["groupName"]
    errors = " | ".join(crd_errors(bad))
    assert "'one' is not of type 'integer'" in errors and "'bogus' was unexpected" in errors
    assert "'groupName' is a required property" in errors
    api = copy.deepcopy(WORKLOADS["api"])
    api["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []  # a typo of volumeMounts
    assert k8s_errors(api)
    api["spec"]["template"]["spec"]["containers"][0].pop("volumeMount")
    api["spec"]["replicas"] = "1"
    assert k8s_errors(api)


# ---------------------------------------------------------------- the Ray cluster


def test_ray_announces_exactly_the_gpus_and_cpus_each_pod_is_given():
    from trainer.platform.placement import BUNDLE_CPUS

    for group, template in ray_pods():
        c = ray_container(template)
        kind, flags = ray_start(script(c))
        assert kind == ("head" if group == "head" else "node"), group
        limits, requests = c["resources"]["limits"], c["resources"]["requests"]
        assert int(flags["--num-gpus"]) == int(limits[GPU]) > 0, group  # Ray's --num-gpus = the pod's GPU limit
        assert requests.get(GPU, limits[GPU]) == limits[GPU], group
        assert int(flags["--num-cpus"]) == int(requests["cpu"]) >= BUNDLE_CPUS * int(limits[GPU]), group
        assert flags["--node-ip-address"] == "$POD_IP", group
        assert container_env(c)["RAY_USAGE_STATS_ENABLED"] == "0" and "--disable-usage-stats" in flags
    # a multi-node run holds gpus_per_node on each node: every Ray pod has the same GPUs
    assert len({gpus(t) for _, t in ray_pods()}) == 1


def test_the_operator_caps_match_the_cluster():
    from trainer.spec.operator_policy import RunPolicy

    env = find("ConfigMap", "aero-env")["data"]
    nodes = 1 + sum(g["replicas"] for g in GROUPS)
    assert int(env["AERO_MAX_NODES"]) == nodes
    assert int(env["AERO_MAX_GPUS"]) == gpus(HEAD["template"]) + sum(g["replicas"] * gpus(g["template"]) for g in GROUPS)
    policy = RunPolicy.from_env(env)  # the names the code reads them by
    assert (policy.max_nodes, policy.max_gpus) == (int(env["AERO_MAX_NODES"]), int(env["AERO_MAX_GPUS"]))
    # the API, which refuses runs at submit, and the worker, which checks again at claim, read the same ConfigMap
    for c in (WORKLOADS["api"]["spec"]["template"]["spec"]["containers"][0], ray_container(HEAD["template"])):
        assert {"configMapRef": {"name": "aero-env"}} in c["envFrom"]
    for g in GROUPS:
        assert g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]


def test_every_ray_pod_has_a_memory_backed_dev_shm():
    for group, template in ray_pods():
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        (mount,) = [m for m in ray_container(template)["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        empty = volumes[mount["name"]]["emptyDir"]
        assert empty["medium"] == "Memory" and empty["sizeLimit"], group


def pod_templates() -> dict[str, dict]:
    return {**{f"ray-{g}": t for g, t in ray_pods()}, **{n: w["spec"]["template"] for n, w in WORKLOADS.items()}}


def test_one_readwritemany_volume_at_the_data_dir_everywhere():
    compose_dir = {resolve_default((svc.get("environment") or {}).get("AERO_DATA_DIR", "")) for svc in COMPOSE.values()}
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    data_dir = re.search(r"AERO_DATA_DIR=(\S+)", dockerfile)[1]
    assert compose_dir - {""} == {data_dir} == {find("ConfigMap", "aero-env")["data"]["AERO_DATA_DIR"]}
    assert f'VOLUME ["{data_dir}"]' in dockerfile
    pvc = find("PersistentVolumeClaim", "aero-data")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]  # verl's ranks write checkpoints from every Ray pod
    claimed = set()
    for name, template in pod_templates().items():
        volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
        data = [n for n, v in volumes.items() if v.get("persistentVolumeClaim", {}).get("claimName") == "aero-data"]
        if name in ("postgres", "redis"):
            assert not data, name
            continue
        claimed.add(name)
        c = template["spec"]["containers"][0]
        mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
        assert data and mounts[data[0]] == data_dir == container_env(c)["AERO_DATA_DIR"], name
    assert claimed == {"ray-head", *(f"ray-{g['groupName']}" for g in GROUPS), *PLATFORM}


def test_the_worker_runs_on_the_head_and_every_node_joins_the_head_service():
    from backend.settings import Settings

    head = ray_container(HEAD["template"])
    text = script(head)
    _, flags = ray_start(text)
    port = container_env(head)["RAY_PORT"]
    assert flags["--port"] == "$RAY_PORT" and [p["containerPort"] for p in head["ports"]] == [int(port)]
    worker = shlex.split(re.search(r"^\s*(aero worker .*?)(?:&|$)", text, re.M)[1])
    assert worker[worker.index("--ray-address") + 1] == f"{HEAD_SERVICE}:$RAY_PORT"
    s = Settings()
    assert set(worker[worker.index("-Q") + 1].split(",")) == {s.cpu_queue, s.gpu_queue}
    assert "kill -QUIT \"$worker_pid\"" in text  # Celery's cold shutdown, as compose's stop_signal
    assert COMPOSE["worker-gpu0"]["stop_signal"] == "SIGQUIT"
    for g in GROUPS:
        c = ray_container(g["template"])
        _, flags = ray_start(script(c))
        assert flags["--address"] == f"{HEAD_SERVICE}:$RAY_PORT" and container_env(c)["RAY_PORT"] == port, g["groupName"]
    # KubeRay keeps these commands (it replaces a Ray container's command that has no `ray start`)
    assert RAYCLUSTER["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
    assert HEAD["rayStartParams"] == {} and all(g["rayStartParams"] == {} for g in GROUPS)
    # token authentication: KubeRay injects one token of the cluster's own into every Ray container
    assert RAYCLUSTER["spec"]["authOptions"] == {"mode": "token"}
    assert tuple(map(int, RAYCLUSTER["spec"]["rayVersion"].split("."))) >= (2, 52)


def test_no_script_runs_ray_stop():
    """`ray stop` stops every Ray process of the user on the host (SkyPilot's own Ray too)."""
    scripts = shell_scripts()
    assert "skypilot/run" in scripts and "ray-head/ray-head" in scripts
    for name, text in scripts.items():
        assert not re.search(r"\bray\s+stop\b", text), name


def test_ray_pods_do_not_prestart_a_worker_per_cpu():
    from trainer.platform.placement import NO_PRESTART

    for group, template in ray_pods():
        assert container_env(ray_container(template))[NO_PRESTART[0]] == NO_PRESTART[1], group


# ---------------------------------------------------------------- beside it: the platform, as in compose


def test_images_are_compose_images():
    gpu_image, cpu_image = COMPOSE["worker-gpu0"]["image"], COMPOSE["api"]["image"]
    for group, template in ray_pods():
        spec = template["spec"]
        assert {c["image"] for c in spec["containers"] + spec.get("initContainers", [])} == {gpu_image}, group
    for name in PLATFORM:
        spec = WORKLOADS[name]["spec"]["template"]["spec"]
        assert {c["image"] for c in spec["containers"] + spec.get("initContainers", [])} == {cpu_image}, name
        assert COMPOSE[name]["image"] == cpu_image
    for name in ("postgres", "redis"):
        assert WORKLOADS[name]["spec"]["template"]["spec"]["containers"][0]["image"] == COMPOSE[name]["image"]


def test_the_platform_runs_what_compose_runs():
    pg_password = resolve_default(COMPOSE["postgres"]["environment"]["POSTGRES_PASSWORD"])
    for name in (*PLATFORM, "redis"):
        (c,) = WORKLOADS[name]["spec"]["template"]["spec"]["containers"]
        assert c["command"] == [resolve_default(x) for x in COMPOSE[name]["command"]], name
        if name == "redis":
            continue
        env = container_env(c, {"POSTGRES_PASSWORD": pg_password})
        for key, value in (COMPOSE[name].get("environment") or {}).items():
            assert env.get(key) == resolve_default(value), (name, key)
        ports = {p["containerPort"] for p in c.get("ports", [])}
        assert ports == {int(str(p).rsplit(":", 1)[1]) for p in COMPOSE[name].get("ports", [])}, name
        compose_check = " ".join(COMPOSE[name]["healthcheck"]["test"]).replace("$$", "$")
        probe = c["livenessProbe"]
        if "httpGet" in probe:
            assert f"localhost:{probe['httpGet']['port']}{probe['httpGet']['path']}" in compose_check, name
            assert c["readinessProbe"]["httpGet"] == probe["httpGet"], name
        else:
            assert probe["exec"]["command"][-1] in compose_check, name
    # the head's worker sees compose's shared worker settings (x-app-env)
    head = container_env(ray_container(HEAD["template"]), {"POSTGRES_PASSWORD": pg_password})
    for key, value in COMPOSE["worker-gpu0"]["environment"].items():
        if key != "AERO_WORKER_CONCURRENCY":  # one GPU per compose worker; the head's worker has the cluster's
            assert head.get(key) == resolve_default(value), key


def test_services_select_their_pods_and_the_addresses_name_them():
    services = {o["metadata"]["name"]: o for _, o in OBJECTS if o["kind"] == "Service"}
    for name, svc in services.items():
        selected = [w for w in WORKLOADS.values()
                    if svc["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert [w["metadata"]["name"] for w in selected] == [name]
        ports = {p["containerPort"] for c in selected[0]["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= ports, name
    for w in WORKLOADS.values():
        assert w["spec"]["selector"]["matchLabels"].items() <= w["spec"]["template"]["metadata"]["labels"].items()

    def served(url: str) -> None:
        u = urlsplit(url)
        assert u.port in {p["port"] for p in services[u.hostname]["spec"]["ports"]}, url

    for template in pod_templates().values():
        for c in template["spec"]["containers"] + template["spec"].get("initContainers", []):
            env = container_env(c)
            for key in ("DATABASE_URL", "REDIS_URL", "AERO_API_URL"):
                if key in env:
                    served(env[key])
            for url in re.findall(r"https?://[\w.:-]+", " ".join(c.get("command", []) + c.get("args", []))):
                served(url)
    assert services["api"]["spec"]["ports"][0]["port"] == 8000  # compose's and the dashboard's AERO_API_URL


def test_secrets_are_the_documented_one():
    refs = {(e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
            for t in pod_templates().values() for c in t["spec"]["containers"] for e in c.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})}
    assert refs == {("aero-postgres", "password")}
    create = "kubectl create secret generic aero-postgres --from-literal=password="
    assert create in (K8S / "kustomization.yaml").read_text() and create in (ROOT / "docs" / "scale.md").read_text()
    assert not [o for _, o in OBJECTS if o["kind"] == "Secret"]  # no password ships in the repository


def test_every_aero_variable_is_one_the_code_reads():
    from trainer.spec.operator_policy import ENV

    known = set(ENV.values())  # the operator's run policy: caps, sandbox, data roots
    for path in ("backend/settings.py", "worker/settings.py", "trainer/platform/placement.py"):
        known |= set(re.findall(r"\b(AERO_[A-Z_]+|DATABASE_URL|REDIS_URL)\b", (ROOT / path).read_text()))
    known |= {"AERO_API_URL", "AERO_API_TOKEN", "AERO_DASHBOARD_ASK_TOKEN"}  # the dashboard's and the CLI's
    for name, template in pod_templates().items():
        for c in template["spec"]["containers"]:
            for key in container_env(c):
                assert not key.startswith("AERO_") or key in known, (name, key)
    for key in SKYTASK["envs"] | SKYTASK["secrets"]:
        assert not key.startswith("AERO_") or key in known or key in ("AERO_BUCKET", "AERO_TORCH_INDEX", "AERO_EXTRAS",
                                                                     "AERO_WORKER_ARGS", "AERO_RAY_WAIT_S"), key


def shell_scripts() -> dict[str, str]:
    out = {}
    for name, template in pod_templates().items():
        for c in template["spec"]["containers"] + template["spec"].get("initContainers", []):
            cmd = [*c.get("command", []), *c.get("args", [])]
            if cmd[:2] == ["/bin/bash", "-c"]:
                out[f"{name}/{c['name']}"] = script(c)
            for probe in ("readinessProbe", "livenessProbe"):
                exe = c.get(probe, {}).get("exec", {}).get("command", [])
                if exe[:2] == ["/bin/bash", "-c"]:
                    out[f"{name}/{c['name']}/{probe}"] = exe[2]
    return {**out, "skypilot/setup": SKYTASK["setup"], "skypilot/run": SKYTASK["run"]}


def test_every_shell_script_parses():
    for name, text in shell_scripts().items():
        proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
        assert proc.returncode == 0, (name, proc.stderr)


# ---------------------------------------------------------------- SkyPilot


def test_the_skypilot_task_mirrors_the_slurm_script():
    task, run = SKYTASK, SKYTASK["run"]
    per_node = int(task["resources"]["accelerators"].split(":")[1])  # H100:8
    envs = {k: str(v) for k, v in task["envs"].items() if v is not None}
    assert int(envs["AERO_MAX_NODES"]) == task["num_nodes"]
    assert int(envs["AERO_MAX_GPUS"]) == task["num_nodes"] * per_node
    assert envs["RAY_PORT"] != "6380"  # SkyPilot's own Ray listens there
    assert envs["AERO_DATA_DIR"] in task["file_mounts"]
    assert task["secrets"] == {"DATABASE_URL": None, "REDIS_URL": None, "RAY_AUTH_TOKEN": None}  # required, never stored
    assert envs["RAY_AUTH_MODE"] == "token"
    for var in ("SKYPILOT_NODE_RANK", "SKYPILOT_NODE_IPS", "SKYPILOT_NUM_GPUS_PER_NODE", "SKYPILOT_NUM_NODES"):
        assert var in run, var
    assert '--num-gpus="$SKYPILOT_NUM_GPUS_PER_NODE"' in run
    assert 'aero worker --ray-address "$address"' in run and "kill -QUIT" in run
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"verl", "ray"} <= set(envs["AERO_EXTRAS"].split(",")) <= set(extras)
    assert "scripts/install_torch.sh" in task["setup"] and (ROOT / "scripts" / "install_torch.sh").exists()


# ---------------------------------------------------------------- the pods' commands, as local processes

TOKEN = uuid.uuid4().hex * 2  # what KubeRay's authOptions put in RAY_AUTH_TOKEN
NODE_WAIT_S = 120.0


def host_ip() -> str:
    """The head pod's IP here: this host's own address (Ray registers a head started on a loopback
    address under it anyway); the worker pod gets 127.0.0.2, so the two nodes are told apart."""
    from ray.util import get_node_ip_address

    return get_node_ip_address()


def base_env(mark: str) -> dict[str, str]:
    """This host's environment without Ray's, the platform's and the store's settings, with the
    test's virtualenv first on PATH (the image's `ray` and `aero`) and the process marker."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_", "AERO_", "SLURM_", "SKYPILOT_")) and k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(PATH=f"{VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", AERO_K8S_TEST_MARK=mark,
               AERO_WORKER_NICE="0", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def marked(mark: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("AERO_K8S_TEST_MARK") == mark:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


class Pods:
    """Processes started as the pods' containers would be, and everything they start."""

    def __init__(self, tmp: Path):
        self.tmp, self.mark, self.procs = tmp, uuid.uuid4().hex, {}
        self.ray_dirs: list[str] = []

    def ray_tmpdir(self) -> str:
        # Ray's Unix socket paths must stay short: /tmp, not tmp_path
        self.ray_dirs.append(tempfile.mkdtemp(prefix="aero-k8s-", dir="/tmp"))
        return self.ray_dirs[-1]

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "ab")
        p = subprocess.Popen(argv, env={**base_env(self.mark), **env}, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self.procs[name] = p
        return p

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def report(self) -> str:
        return "\n".join(f"--- {n} (rc={p.poll()})\n" + "\n".join(self.log(n).splitlines()[-40:])
                         for n, p in self.procs.items())

    def wait_for(self, name: str, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log(name):
            assert self.procs[name].poll() is None, f"{name} exited before {text!r}\n{self.report()}"
            assert time.monotonic() < deadline, f"no {text!r} from {name} within {timeout} s\n{self.report()}"
            time.sleep(0.5)

    def assert_nothing_left(self, timeout: float = 60.0) -> None:
        """Every process the pods started has ended (those left are killed, and the test fails),
        but Ray's per-node agents: they outlive their raylet by tens of seconds on a loaded 2-core
        host (seen once in a full suite), and a container's end kills them with everything else in
        it. The worker, the raylet and the GCS must be gone."""
        deadline = time.monotonic() + timeout
        while marked(self.mark) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = [name for name in self.close() if name.split(" ", 1)[1] not in RAY_AGENTS]
        assert not left, f"still running {timeout:.0f} s after the containers' processes ended (killed now): {left}"

    def close(self) -> list[str]:
        """Kill whatever is left (a container's end kills every process in it); the names left."""
        left = []
        for proc in marked(self.mark):
            try:
                left.append(f"{proc.pid} {proc.name()}")
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for d in self.ray_dirs:
            shutil.rmtree(d, ignore_errors=True)
        return left


def celery_main(mark: str) -> psutil.Process:
    """The Celery worker's main process (`aero worker` execs into it; its pool children share its
    command line)."""
    mains = []
    for p in marked(mark):
        try:
            if "celery" in " ".join(p.cmdline()) and "celery" not in " ".join(p.parent().cmdline()):
                mains.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, AttributeError):
            pass
    (main,) = mains
    return main


@pytest.fixture
def pods(tmp_path):
    made = Pods(tmp_path)
    yield made
    made.close()


def driver_check(pods: Pods, address: str, ray_tmpdir: str, want_nodes: int) -> dict:
    """From a driver on the head: the alive nodes (IP, GPUs), and the GPU ids a task holding all
    of a node's GPUs gets on each node."""
    code = f"""
import json, time
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as Pin
ray.init(address={address!r}, logging_level="ERROR", log_to_driver=False)
deadline = time.monotonic() + {NODE_WAIT_S}
while len(alive := [n for n in ray.nodes() if n["Alive"]]) < {want_nodes} and time.monotonic() < deadline:
    time.sleep(0.5)
@ray.remote(num_cpus=0)
def gpu_ids():
    return ray.get_gpu_ids()
out = {{n["NodeManagerAddress"]: {{"gpus": n["Resources"].get("GPU", 0),
        "task_gpus": ray.get(gpu_ids.options(num_gpus=n["Resources"].get("GPU", 0),
                                            scheduling_strategy=Pin(n["NodeID"], soft=False)).remote(), timeout=120)}}
       for n in alive}}
out["driver"] = ray.util.get_node_ip_address()
print("CHECK " + json.dumps(out))
"""
    env = {**base_env(pods.mark), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN, "RAY_TMPDIR": ray_tmpdir}
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=NODE_WAIT_S + 120)
    assert proc.returncode == 0, f"{proc.stderr[-3000:]}\n{pods.report()}"
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("CHECK ")]
    return json.loads(line[len("CHECK "):])


def submit_run(data: Path) -> int:
    """A tiny embedded run that holds one GPU (logical here), stored and enqueued as the API does."""
    from backend.db.runs import create_run
    from backend.db.session import session_scope
    from backend.queue import enqueue_run
    from backend.services.configs import queue_for, run_gpus, validate_config
    from backend.settings import Settings
    from trainer.spec.config import for_method

    settings = Settings(data_dir=data, database_url_env=None, redis_url=None)
    raw = dict(method="grpo", preset="tiny", steps=2, batch_prompts=4, n_total=4, max_new_tokens=8, eval_every=0,
               eval_problems=4, eval_n=2, checkpoint_every=0, device="cpu", resources={"gpus_per_node": 1})
    cfg = validate_config(for_method(raw, "grpo"), settings.run_policy)
    with session_scope(settings.database_url) as s:
        run_id = create_run(s, cfg.model_dump(mode="json"), queue=queue_for(cfg), gpus=run_gpus(cfg)).id
    enqueue_run(settings, run_id, queue_for(cfg))
    return run_id


def wait_run(data: Path, run_id: int, pods: Pods, timeout: float = 240.0):
    from backend.db.runs import get_run
    from backend.db.session import session_scope

    deadline = time.monotonic() + timeout
    while True:
        with session_scope(f"sqlite:///{data / 'aero.sqlite'}") as s:
            run = get_run(s, run_id)
            state = dict(status=run.status, placement=run.placement, gpus=run.gpus, error=run.error, step=run.current_step)
        if state["status"] in ("succeeded", "failed", "cancelled"):
            return state
        assert time.monotonic() < deadline, f"run {run_id} not done within {timeout} s: {state}\n{pods.report()}"
        assert pods.procs["head"].poll() is None, f"the head exited\n{pods.report()}"
        time.sleep(1)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_ray_pods_commands_form_a_cluster_and_a_run_trains_on_it(pods, tmp_path):
    pytest.importorskip("ray")
    from backend.db.migrate import migrate

    data = tmp_path / "data"  # the PVC at /data
    data.mkdir()
    migrate(f"sqlite:///{data / 'aero.sqlite'}")  # the API's job on start (AERO_MIGRATE_ON_START)
    port = str(free_port())
    head_c, (group, worker_template) = ray_container(HEAD["template"]), (GROUPS[0]["groupName"], GROUPS[0]["template"])
    worker_c = ray_container(worker_template)

    def env_of(container: dict, pod_ip: str) -> dict[str, str]:
        env = container_env(container, {"POD_IP": pod_ip})
        for key in ("DATABASE_URL", "REDIS_URL", "POSTGRES_PASSWORD"):  # the embedded store and broker instead
            env.pop(key, None)
        env.update(RAY_PORT=port, AERO_DATA_DIR=str(data), RAY_TMPDIR=pods.ray_tmpdir(), RAY_AUTH_MODE="token",
                   RAY_AUTH_TOKEN=TOKEN, AERO_WORKER_CONCURRENCY="1", AERO_BROKER_POLL_S="0.2", AERO_HEARTBEAT_S="1")
        return env

    def argv(container: dict) -> list[str]:
        return ["/bin/bash", "-c", script(container).replace(HEAD_SERVICE, "127.0.0.1")]

    head_ip = host_ip()
    head_env = env_of(head_c, head_ip)
    pods.start("head", argv(head_c), head_env)
    pods.start(group, argv(worker_c), env_of(worker_c, "127.0.0.2"))
    pods.wait_for("head", "the Ray head answers", NODE_WAIT_S)

    check = driver_check(pods, f"127.0.0.1:{port}", head_env["RAY_TMPDIR"], 2)
    assert check.pop("driver") == head_ip, check  # a driver on the head pod sits on the head node
    assert sorted(check) == sorted([head_ip, "127.0.0.2"]), f"{check}\n{pods.report()}"
    for ip, template in ((head_ip, HEAD["template"]), ("127.0.0.2", worker_template)):
        assert check[ip]["gpus"] == gpus(template), check  # the pod's nvidia.com/gpu limit, as logical GPUs
        assert sorted(map(int, check[ip]["task_gpus"])) == list(range(gpus(template))), check

    pods.wait_for("head", " ready.", 120)  # celery's "aero@HOST ready."
    celery = celery_main(pods.mark)
    assert celery.environ()["AERO_RAY_ADDRESS"] == f"127.0.0.1:{port}"  # the head Service's address
    run = wait_run(data, submit_run(data), pods)
    assert run["status"] == "succeeded" and run["step"] == 2, f"{run}\n{pods.report()}"
    placement = run["placement"]
    assert run["gpus"] == 1 and placement["cluster"] == f"127.0.0.1:{port}", run
    assert placement["node_ips"] == [head_ip] and len(placement["gpu_ids"][0]) == 1, run  # the worker's own node

    # the kubelet's SIGTERM to the head container's process: the worker gets SIGQUIT, then Ray stops
    pods.procs["head"].send_signal(signal.SIGTERM)
    assert pods.procs["head"].wait(60) == 143, pods.report()  # terminationGracePeriodSeconds: 60
    log = pods.log("head")
    assert "stopping the worker, then Ray" in log and "aero-ray-head: stopped" in log, pods.report()
    assert "Cold shutdown" in log  # Celery's answer to SIGQUIT
    pods.procs[group].send_signal(signal.SIGTERM)
    pods.procs[group].wait(30)
    pods.assert_nothing_left()  # a container's end kills whatever is left in it; nothing piles up


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_skypilot_run_forms_a_cluster_and_starts_the_worker_on_the_head(pods, tmp_path):
    pytest.importorskip("ray")
    from backend.db.migrate import migrate

    data = tmp_path / "data"
    data.mkdir()
    migrate(f"sqlite:///{data / 'aero.sqlite'}")
    home = tmp_path / "home"  # the run finds the setup's virtualenv at ~/aero-venv
    home.mkdir()
    (home / "aero-venv").symlink_to(VENV)
    port, per_node = str(free_port()), int(SKYTASK["resources"]["accelerators"].split(":")[1])
    envs = {k: str(v) for k, v in SKYTASK["envs"].items() if v is not None}
    for rank in (0, 1):
        env = {**envs, "HOME": str(home), "RAY_PORT": port, "AERO_DATA_DIR": str(data), "AERO_RAY_WAIT_S": "120",
               "AERO_WORKER_ARGS": "-Q gpu,cpu -c 1", "AERO_BROKER_POLL_S": "0.2", "RAY_TMPDIR": pods.ray_tmpdir(),
               "RAY_AUTH_TOKEN": TOKEN, "SKYPILOT_NODE_RANK": str(rank), "SKYPILOT_NODE_IPS": f"{host_ip()}\n127.0.0.2\n",
               "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NUM_GPUS_PER_NODE": str(per_node)}
        pods.start(f"rank{rank}", ["/bin/bash", "-c", SKYTASK["run"]], env)
    pods.wait_for("rank0", f"2 node(s), GPUs [{per_node}, {per_node}]", NODE_WAIT_S + 60)
    pods.wait_for("rank0", " ready.", 120)
    celery = celery_main(pods.mark)
    assert celery.environ()["AERO_RAY_ADDRESS"] == f"{host_ip()}:{port}"
    pods.procs["rank0"].send_signal(signal.SIGTERM)  # `sky cancel`
    assert pods.procs["rank0"].wait(60) == 143, pods.report()
    assert "stopping the worker" in pods.log("rank0") and "Cold shutdown" in pods.log("rank0")
    pods.procs["rank1"].send_signal(signal.SIGTERM)
    pods.procs["rank1"].wait(30)
    pods.assert_nothing_left()
