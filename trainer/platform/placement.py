"""Placement: a run holds its GPUs through Ray, waits while others hold them, frees only its own.

Ray is the one scheduler of devices (docs/architecture.md "Placement"): verl already runs on it,
and it is what users form clusters with. A run connects to one Ray cluster for its lifetime, as
its own Ray job, so its runtime environment is its own and everything it creates dies with it:

* the cluster the operator configured (``AERO_RAY_ADDRESS``; ``RAY_ADDRESS`` too): an existing
  Ray cluster, or the head ``aero worker --gpus 0,1,2,3`` starts for its pool processes;
* else a Ray of the run's own (``address="local"``), never whatever cluster Ray's
  ``ray_current_cluster`` file names (a stale one, left by a crashed ``ray start``, made every
  verl run fail).

What a run holds (trainer/spec/resources.py):

* a verl run: one placement group per node, ``gpus_per_node`` bundles of ``{GPU: 1, CPU: 3}``
  each (the exact pools verl's ResourcePoolManager would make), handed to verl's worker groups;
* an embedded run on a worker with a Ray cluster: one holder actor with ``num_gpus`` pinned to
  the worker's own node. The run trains in the worker's process on the device Ray gave the
  holder (``torch.cuda.set_device``): Ray counts the GPU, the run's owner stays the process that
  heartbeats and checkpoints, and a killed owner frees it (its job's actors die with it).

A request Ray cannot meet yet stays pending in Ray's queue; the run waits (``on_wait`` says for
what), stays cancellable, and never fails for want of a free GPU. Ray keeps nothing for a pending
request, so a multi-GPU run waiting past ``AERO_STARVATION_S`` makes smaller runs hold back until
it is placed (trainer/platform/reservations.py).
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from trainer.platform.reservations import LIMIT_ENV, Reservation

BUNDLE_CPUS = 3  # logical CPUs per GPU bundle: verl's ResourcePoolManager.max_colocate_count default
POLL_S = 0.5  # how often a waiting run looks at should_stop and the cluster's free GPUs
REGROUP_S = 30.0  # a multi-node request holding some nodes but not all this long lets go and retries
NAMESPACE = "aero"
NO_PRESTART = ("RAY_prestart_worker_first_driver", "0")  # see ray_session


class PlacementError(RuntimeError):
    """A run that can never be placed (not: one that waits)."""


class NodeLost(RuntimeError):
    """A node the run trained on left the Ray cluster mid-run (its ranks, rollout server and
    checkpoints-in-progress with it). The run's checkpoints are on the shared run directory, so a
    retry resumes from the last one: the platform's worker re-queues the run (worker/runner.py)."""


def cluster_address(environ: dict[str, str] | None = None) -> str | None:
    """The operator's Ray cluster (``AERO_RAY_ADDRESS``, else ``RAY_ADDRESS``), or None: a Ray of the run's own."""
    env = os.environ if environ is None else environ
    return (env.get("AERO_RAY_ADDRESS") or env.get("RAY_ADDRESS") or "").strip() or None


@dataclass
class Placement:
    """Where a run trains: its Ray cluster, node ids and IPs, and Ray's GPU ids per node."""

    cluster: str  # the address joined, or "own" (a local Ray of the run's own)
    nodes: list[str] = field(default_factory=list)
    node_ips: list[str] = field(default_factory=list)
    gpu_ids: list[list[str]] = field(default_factory=list)
    waited_s: float = 0.0
    placed_at: float = field(default_factory=time.time)  # Unix time the run got its GPUs
    groups: list[Any] = field(default_factory=list, repr=False)  # placement groups (verl)
    holder: Any = field(default=None, repr=False)  # the embedded run's GPU holder actor
    network: list[dict] = field(default_factory=list)  # per node: the NCCL_*/GLOO_* values its processes saw

    def summary(self) -> dict[str, Any]:
        """JSON for the run's record and logs."""
        out = {"cluster": self.cluster, "nodes": self.nodes, "node_ips": self.node_ips, "gpu_ids": self.gpu_ids,
               "waited_s": round(self.waited_s, 3), "placed_at": round(self.placed_at, 3)}
        return {**out, "network": self.network} if self.network else out


# ---------------------------------------------------------------- the run's Ray session


@contextlib.contextmanager
def ray_session(runtime_env: dict[str, Any] | None = None, *, own_gpus: int = 0, own_cpus: int | None = None,
                address: str | None = None) -> Iterator[str]:
    """Connect this process to the run's Ray cluster as a job of its own, and disconnect at the end
    (Ray then kills the job's actors and removes its placement groups). Yields the cluster: the
    address joined, or "own" for a local Ray started with ``own_gpus`` logical-or-real GPUs."""
    import ray

    if ray.is_initialized():  # a session left behind by a crashed run in this process: not ours
        ray.shutdown()
    # A Ray we start ourselves must not prestart one idle Python worker per logical CPU for its
    # first driver (16+ processes importing Ray on a 2-core host): workers start as tasks need them.
    os.environ.setdefault(NO_PRESTART[0], NO_PRESTART[1])
    address = address or cluster_address()
    # a namespace of its own too: verl names its actors (reward_loop_worker_0, ...), and two runs on
    # one cluster in one namespace collide on those names
    kwargs: dict[str, Any] = {"runtime_env": runtime_env or {}, "log_to_driver": True,
                              "namespace": f"{NAMESPACE}-{os.getpid()}-{random.getrandbits(32):08x}"}
    if address:
        kwargs["address"] = address
    else:
        kwargs.update(address="local", num_gpus=own_gpus, num_cpus=own_cpus or max(os.cpu_count() or 1, 16),
                      include_dashboard=False)
    with real_std_streams():
        ray.init(**kwargs)
    try:
        yield address or "own"
    finally:
        ray.shutdown()


@contextlib.contextmanager
def real_std_streams():
    """The process's own stdout/stderr while Ray connects: a Celery worker replaces them with
    logging proxies that have no file descriptor, and Ray's ``faulthandler.enable()`` needs one."""
    saved = sys.stdout, sys.stderr
    try:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            try:
                stream.fileno()
            except (AttributeError, OSError, ValueError):
                setattr(sys, name, getattr(sys, f"__{name}__"))
        yield
    finally:
        sys.stdout, sys.stderr = saved


# ---------------------------------------------------------------- waiting


def gpu_counts(node_id: str | None = None) -> tuple[float, float]:
    """(free, total) GPUs of the connected cluster, or of its node ``node_id``."""
    import ray

    if node_id is None:
        return ray.available_resources().get("GPU", 0.0), ray.cluster_resources().get("GPU", 0.0)
    from ray._private.state import available_resources_per_node  # no public per-node view (verl reads it too)

    total = next((n["Resources"].get("GPU", 0.0) for n in ray.nodes() if n["NodeID"] == node_id), 0.0)
    return available_resources_per_node().get(node_id, {}).get("GPU", 0.0), total


def waiting_text(gpus_per_node: int, nodes: int, node_id: str | None = None) -> str:
    """What a run waits for, and what the cluster (or the run's own node ``node_id``) has now: the
    run's ``waiting_for``."""
    free, total = gpu_counts(node_id)
    want = f"{gpus_per_node * nodes} GPU(s)" + (f" on {nodes} nodes ({gpus_per_node} each)" if nodes > 1 else "")
    where = "this worker's node" if node_id else "the Ray cluster"
    text = f"{want}: {free:g} of {where}'s {total:g} free"
    if total < gpus_per_node * (1 if node_id else nodes):
        text += f"; {where} is smaller than the run, it starts when GPUs join"
    return text


def _wait(refs: list, gpus_per_node: int, nodes: int, should_stop: Callable[[], bool] | None,
          on_wait: Callable[[str | None], None] | None, give_up_s: float | None = None,
          node_id: str | None = None, reservation: Reservation | None = None) -> bool | None:
    """Wait until every ref is ready: True; False when ``should_stop`` asked to stop; None when
    some but not all were ready for ``give_up_s`` (a partial hold to let go of), or when
    ``reservation`` must hold back for a starving larger run (let go of the request, hold back,
    ask again: trainer/platform/reservations.py). Each poll renews a starving run's reservation."""
    import ray

    shown, partial_since = None, None
    while True:
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=POLL_S)
        if len(ready) == len(refs):
            return True
        if should_stop is not None and should_stop():
            return False
        if reservation is not None and reservation.blocker(waiting=True) is not None:
            return None
        now = time.monotonic()
        partial_since = (partial_since or now) if ready else None
        if give_up_s is not None and partial_since is not None and now - partial_since > give_up_s:
            return None
        text = waiting_text(gpus_per_node, nodes, node_id) + (reservation.note() if reservation is not None else "")
        if on_wait is not None and text != shown:
            on_wait(text)
            shown = text


def _hold_back(reservation: Reservation, gpus_per_node: int, nodes: int, should_stop: Callable[[], bool] | None,
               on_wait: Callable[[str | None], None] | None, node_id: str | None = None) -> bool:
    """Ask Ray for nothing while a starving larger run is registered (trainer/platform/reservations.py): a
    pending request of ours would take the GPUs it waits for as they free. True to go on and ask;
    False when ``should_stop`` said stop. ``on_wait`` says whom it holds back for."""
    shown = None
    while (blocker := reservation.blocker()) is not None:
        if should_stop is not None and should_stop():
            return False
        text = (waiting_text(gpus_per_node, nodes, node_id) + f"; held back for a run that has waited over "
                f"{reservation.limit_s:g} s ({LIMIT_ENV}) for {blocker['gpus']} GPU(s)")
        if on_wait is not None and text != shown:
            on_wait(text)
            shown = text
        time.sleep(POLL_S)
    return True


# ---------------------------------------------------------------- verl: placement groups


def node_groups(gpus_per_node: int, nodes: int, should_stop: Callable[[], bool] | None = None,
                on_wait: Callable[[str | None], None] | None = None,
                bundle_cpus: int = BUNDLE_CPUS, starvation_s: float | None = None) -> list | None:
    """One ready placement group per node, on ``nodes`` different nodes (``gpus_per_node`` bundles
    of ``{GPU: 1, CPU: bundle_cpus}`` each, STRICT_PACK: the pools verl's ResourcePoolManager makes),
    or None when ``should_stop`` said stop while waiting.

    Several nodes are waited for as one STRICT_SPREAD gate group (Ray gang-schedules it: a run
    never holds some nodes while it waits for the rest, so two runs cannot wait on each other),
    which is then exchanged for per-node groups pinned to the gate's nodes. If another run takes
    a GPU in that exchange, the run waits for it; one holding part of its nodes for
    :data:`REGROUP_S` lets go and starts over after a random pause.

    No starvation (trainer/platform/reservations.py): past ``starvation_s`` (None: the operator's
    ``AERO_STARVATION_S``; 0: off) a multi-GPU request registers and smaller ones hold back for it,
    before asking Ray and, by letting go of their pending request, while they wait."""
    from ray.util.placement_group import placement_group, remove_placement_group

    bundles = [{"GPU": 1, "CPU": bundle_cpus} for _ in range(gpus_per_node)]
    name = f"aero-{os.getpid()}-{random.getrandbits(24):06x}"  # one per request: a process may place several
    reservation = Reservation.of(gpus_per_node, nodes, starvation_s, shared=cluster_address() is not None)
    try:
        while True:
            if not _hold_back(reservation, gpus_per_node, nodes, should_stop, on_wait):
                return None
            if nodes == 1:
                group = placement_group(bundles, strategy="STRICT_PACK", name=f"{name}-0")
                ready = _wait([group.ready()], gpus_per_node, 1, should_stop, on_wait, reservation=reservation)
                if ready:
                    return [group]
                remove_placement_group(group)
                if ready is False:
                    return None
                continue  # held back for a starving larger run: ask again once it is placed
            groups = _spread_groups(bundles, gpus_per_node, nodes, bundle_cpus, name, should_stop, on_wait, reservation)
            if groups != []:
                return groups
    finally:
        reservation.release()


def _spread_groups(bundles: list[dict], gpus_per_node: int, nodes: int, bundle_cpus: int, name: str,
                   should_stop: Callable[[], bool] | None, on_wait: Callable[[str | None], None] | None,
                   reservation: Reservation) -> list | None:
    """One try of a multi-node request (:func:`node_groups`): the ready per-node groups; None when
    stopped; [] to try again (held back for a starving run, or a partial hold let go of)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    gate = placement_group([{"GPU": gpus_per_node, "CPU": gpus_per_node * bundle_cpus}] * nodes,
                           strategy="STRICT_SPREAD", name=f"{name}-gate")
    ready = _wait([gate.ready()], gpus_per_node, nodes, should_stop, on_wait, reservation=reservation)
    if ready:
        chosen = list(dict.fromkeys(ray.util.placement_group_table(gate)["bundles_to_node_id"].values()))
    remove_placement_group(gate)
    if not ready:
        return None if ready is False else []
    groups = [placement_group(bundles, strategy="STRICT_PACK", name=f"{name}-{i}",
                              bundle_label_selector=[{"ray.io/node-id": node}] * gpus_per_node)
              for i, node in enumerate(chosen)]
    done = _wait([g.ready() for g in groups], gpus_per_node, nodes, should_stop, on_wait, give_up_s=REGROUP_S,
                 reservation=reservation)
    if done:
        return groups
    for g in groups:
        remove_placement_group(g)
    if done is False:
        return None
    time.sleep(random.uniform(1.0, 5.0))
    return []


def describe_groups(groups: list) -> tuple[list[str], list[str], list[list[str]]]:
    """(node ids, node IPs, GPU ids per node) of ready placement groups, read from a task in each
    bundle (Ray sets its GPU ids)."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    probe = ray.remote(num_cpus=0, num_gpus=1)(_where)
    refs = [[probe.options(scheduling_strategy=PlacementGroupSchedulingStrategy(g, placement_group_bundle_index=i))
             .remote() for i in range(g.bundle_count)] for g in groups]
    out = [ray.get(r) for r in refs]
    return ([o[0][0] for o in out], [o[0][1] for o in out], [[gpu for _, _, ids in o for gpu in ids] for o in out])


def _where() -> tuple[str, str, list[str]]:
    import ray

    ctx = ray.get_runtime_context()
    return ctx.get_node_id(), ray.util.get_node_ip_address(), [str(i) for i in ray.get_gpu_ids()]


def check_shared_dir(groups: list, out_dir: str | os.PathLike) -> None:
    """Fail fast unless every node of the run sees its run directory: the launcher writes a marker
    there and a task on each of the run's nodes reads it back (verl's ranks write checkpoints on
    their own nodes, and a node that writes elsewhere loses them hours later). Raises
    :class:`PlacementError` naming each node that cannot see it, and what to mount."""
    import uuid

    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    marker = Path(out_dir) / f".aero-visible-{uuid.uuid4().hex}"
    marker.write_text(marker.name)
    try:
        probe = ray.remote(num_cpus=0, num_gpus=0)(_sees)
        seen = ray.get([probe.options(scheduling_strategy=PlacementGroupSchedulingStrategy(g, 0)).remote(str(marker))
                        for g in groups])
    finally:
        marker.unlink(missing_ok=True)
    blind = [f"{ip} (node {node[:12]})" for node, ip, ok in seen if not ok]
    if blind:
        raise PlacementError(f"the run directory {out_dir} is not visible on {', '.join(blind)}: a run over several nodes "
                             "writes checkpoints there from every node. Mount the same shared filesystem at the same "
                             "path on every node (the worker's AERO_DATA_DIR) and resubmit (docs/scale.md)")


def _sees(path: str) -> tuple[str, str, bool]:
    node, ip, _ = _where()
    return node, ip, Path(path).is_file() and Path(path).read_text() == Path(path).name


# The collective backends' settings a multi-node run needs on every rank (the interface to use,
# InfiniBand devices, timeouts): forwarded from the worker's environment, which is the operator's.
NETWORK_PREFIXES = ("NCCL_", "GLOO_")
FORWARD_ENV = "AERO_RUN_ENV"  # more variable names the operator forwards, comma-separated
IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def forwarded_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The operator's variables every process of a run gets (its Ray runtime environment): each
    ``NCCL_*`` and ``GLOO_*`` set on the worker, and the names listed in ``AERO_RUN_ENV``."""
    env = os.environ if environ is None else environ
    names = {n.strip() for n in env.get(FORWARD_ENV, "").split(",") if n.strip()}
    return {k: v for k, v in env.items() if k.startswith(NETWORK_PREFIXES) or k in names}


def check_network(groups: list, env: dict[str, str]) -> list[dict]:
    """Fail fast unless every node of the run has the network interfaces the forwarded settings name
    (``NCCL_SOCKET_IFNAME`` / ``GLOO_SOCKET_IFNAME``: a comma list; a leading ``^`` excludes, ``=``
    matches exactly, otherwise a prefix): a task on each node, with the run's runtime environment,
    reads what it sees. Returns, per node, its IP and the values it saw; raises
    :class:`PlacementError` naming the interface, the variable and the node."""
    if not env:
        return []
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    probe = ray.remote(num_cpus=0, num_gpus=0)(_network_seen)
    seen = ray.get([probe.options(scheduling_strategy=PlacementGroupSchedulingStrategy(g, 0)).remote(sorted(env))
                    for g in groups])
    bad = [f"{var}={value!r} matches no network interface on {ip} (node {node[:12]}; it has {', '.join(names)})"
           for node, ip, vals, names in seen for var, value in vals.items()
           if var in IFNAME_VARS and value and not ifname_matches(value, names)]
    if bad:
        raise PlacementError("; ".join(bad) + ". The operator sets these on the worker (forwarded to every rank): "
                             "name an interface every node of the run has, or unset it (docs/scale.md)")
    # recorded with the run: the collective backends' values only (AERO_RUN_ENV may name secrets)
    return [{"node_ip": ip, "env": {k: v for k, v in vals.items() if k.startswith(NETWORK_PREFIXES)}}
            for _, ip, vals, _ in seen]


def ifname_matches(spec: str, names: list[str]) -> bool:
    """Whether an ``*_SOCKET_IFNAME`` value selects any of ``names`` (NCCL's syntax; gloo takes one
    exact name, which the exact-or-prefix rule also accepts)."""
    if spec.startswith("^"):
        excluded = [s.lstrip("=") for s in spec[1:].split(",") if s]
        return any(not any(n.startswith(e) for e in excluded) for n in names)
    exact = spec.startswith("=")
    wanted = [s for s in spec.lstrip("=").split(",") if s]
    return any(n == w or (not exact and n.startswith(w)) for n in names for w in wanted)


def _network_seen(keys: list[str]) -> tuple[str, str, dict[str, str | None], list[str]]:
    import socket

    node, ip, _ = _where()
    return node, ip, {k: os.environ.get(k) for k in keys}, sorted(name for _, name in socket.if_nameindex())


def release_groups(groups: list) -> None:
    """Remove the run's own placement groups (never another run's)."""
    from ray.util.placement_group import remove_placement_group

    for g in groups:
        with contextlib.suppress(Exception):  # already gone with its job
            remove_placement_group(g)


# ---------------------------------------------------------------- embedded: a GPU holder on this node


class GpuHolder:
    """An actor that does nothing but hold ``num_gpus`` of this node for a run of the embedded engine."""

    def where(self) -> tuple[str, str, list[str]]:
        return _where()


def hold_local_gpus(n: int, should_stop: Callable[[], bool] | None = None,
                    on_wait: Callable[[str | None], None] | None = None, starvation_s: float | None = None) -> Any | None:
    """A ready :class:`GpuHolder` of ``n`` GPUs on this process's own Ray node (the run trains here),
    or None when ``should_stop`` said stop while waiting. It holds back for a starving larger run
    as :func:`node_groups` does (``starvation_s``; trainer/platform/reservations.py)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    if here is None:
        raise PlacementError("this worker is a Ray client with no Ray node on its host: an embedded run trains on its "
                             "worker's own GPU, so start the worker on a node of the cluster (docs/scale.md)")
    reservation = Reservation.of(n, 1, starvation_s, shared=cluster_address() is not None, node_id=here)
    try:
        while True:
            if not _hold_back(reservation, n, 1, should_stop, on_wait, node_id=here):
                return None
            holder = ray.remote(num_gpus=n, num_cpus=0)(GpuHolder).options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)).remote()
            ready = _wait([holder.where.remote()], n, 1, should_stop, on_wait, node_id=here, reservation=reservation)
            if ready:
                return holder
            ray.kill(holder)
            if ready is False:
                return None
    finally:
        reservation.release()


def local_cuda_index(ray_gpu_id: str, visible: str | None = None) -> int:
    """The torch index of the GPU Ray calls ``ray_gpu_id`` in a process whose
    ``CUDA_VISIBLE_DEVICES`` is ``visible`` (Ray's ids are the node's physical ones)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if not visible:
        return int(ray_gpu_id)
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if ray_gpu_id not in ids:
        raise PlacementError(f"Ray gave GPU {ray_gpu_id}, which this worker's CUDA_VISIBLE_DEVICES={visible} hides; "
                             "give the worker and its Ray node the same GPUs (aero worker --gpus)")
    return ids.index(ray_gpu_id)


@contextlib.contextmanager
def placed_embedded(gpus: int, device_is_cuda: bool, should_stop: Callable[[], bool] | None = None,
                    on_wait: Callable[[str | None], None] | None = None) -> Iterator[Placement | None]:
    """An embedded run's GPU, held through the operator's Ray cluster for as long as the run trains;
    on CUDA this process's current device becomes that GPU. Yields None when stopped while waiting."""
    t0 = time.monotonic()
    with ray_session() as cluster:
        holder = hold_local_gpus(gpus, should_stop, on_wait)
        if holder is None:
            yield None
            return
        import ray

        node, ip, ids = ray.get(holder.where.remote())
        if on_wait is not None:
            on_wait(None)
        if device_is_cuda:
            import torch

            torch.cuda.set_device(local_cuda_index(ids[0]))
        try:
            yield Placement(cluster, [node], [ip], [ids], time.monotonic() - t0, holder=holder)
        finally:
            with contextlib.suppress(Exception):
                ray.kill(holder)


def wants_placement(engine_uses_ray: bool, gpus: int) -> bool:
    """Whether a run goes through Ray: always on a Ray engine (verl); on the embedded engine when it
    holds a GPU and the operator gave the worker a Ray cluster (else it trains as before, on the
    process's current device)."""
    return engine_uses_ray or (gpus > 0 and cluster_address() is not None)
