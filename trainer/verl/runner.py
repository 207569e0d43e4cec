"""Launch a platform run on verl (Ray): ``run_verl(cfg, out_dir, sink, should_stop)``.

Same contract as ``trainer.platform.run.run_training``: validates the config, writes OUT/config.json,
logs every step to ``sink`` (``log``/``log_eval``), resumes from OUT's latest checkpoint
(verl's own, OUT/verl_checkpoints), polls ``should_stop`` and returns
``{"status": "completed" | "stopped", "last_step", "final_eval", "n_params", "data_pos"}``.

    launcher (worker process)               Ray task-runner actor (PlatformTaskRunner)
    -------------------------               --------------------------------------
    data -> OUT/verl_data/*.parquet
    overrides -> hydra compose + checks
    ray_session (the run's own Ray job)
    node_groups: one placement group per
      node, waits while GPUs are taken
    runner.run.remote(config, groups, -->  build datasets, PlatformTrainer, workers on the
      gpu_ids)                             held groups (held_pools); fit(); each step's
                                           system/gpu_* read on every node (RunGpus)
    relay OUT/verl/*.jsonl -> sink   <----  PlatformLogger -> JsonlSink(OUT/verl)
    should_stop() -> touch OUT/verl/STOP -> polled after each step: checkpoint, stop
    a node of the run dies -> NodeLost naming it (IP, node id) and the checkpoint a retry resumes from
    kill the runner, remove its groups,
      disconnect (the job's actors die)

The actor may run on another node: OUT must be on a filesystem every node sees.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from trainer.spec.config import ConfigError, RunConfig, parse_run_config
from trainer.platform.placement import NodeLost
from trainer.platform.sinks import JsonlSink, MetricSink
from trainer.platform.trackers import verl_env

POLL_S = 0.5  # how often the launcher relays metrics and looks for a stop request


def model_shape(model_path: str | Path) -> tuple[int, int, int]:
    """(N parameters, layers, d_model) of a local HF model without loading weights (meta device)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(model_path), local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters()), config.num_hidden_layers, config.hidden_size


def check_verl_config(cfg: RunConfig) -> None:
    """The worker-side check before anything starts: ``model_path`` is a local model directory
    (ConfigError naming it). The config's rules, verl's included, are
    ``trainer.spec.config.cross_field_issues``'s, so the API refuses them at submit; this one needs
    the worker's filesystem, and the API never says whether a path exists."""
    assert cfg.engine == "verl", "run_verl runs verl configs"
    if cfg.model_path is not None and not (Path(cfg.model_path).expanduser() / "config.json").is_file():
        raise ConfigError([("model_path", f"{cfg.model_path} is not a local model directory (no config.json); "
                            "nothing is downloaded")])


def resolve_device(cfg: RunConfig) -> str:
    """"cuda" or "cpu" for the verl platform: ``device`` as set, or CUDA when the launcher sees a GPU."""
    if cfg.device != "auto":
        return cfg.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_gpus_per_node(cfg: RunConfig) -> int:
    """FSDP ranks per node: the run's ``resources.gpus_per_node``, which the API resolved into the
    stored config at submit; a config parsed without the policy (a direct ``run_verl`` call) gets
    the operator's default here the same way (trainer/spec/resources.py ``resolve_gpus``)."""
    from trainer.spec.operator_policy import RunPolicy

    return RunPolicy.from_env().resolve(cfg).resources.gpus_per_node


def sample_rule_env() -> dict[str, str]:
    """The operator's rollout-sample settings (AERO_ROLLOUT_*, trainer/spec/operator_policy.py) as set here, for
    the trainer actor, which reads them with ``SampleRules.from_env``."""
    from trainer.spec.operator_policy import ENV

    names = [var for field, var in ENV.items() if field.startswith("rollout_")]
    return {v: os.environ[v] for v in names if os.environ.get(v, "").strip()}


def platform_env(device: str) -> dict[str, str]:
    """Environment of every verl process: our plugins (trainer/verl/plugins), and on the CPU the
    CPU platform, verl's FSDP engine looked up under "cuda" (it is registered for cuda and npu
    only; the class is device-agnostic) and one thread per worker process (several processes
    share the cores)."""
    from trainer.verl.plugins import MODULE, PLATFORM_NAME

    env = {"VERL_USE_EXTERNAL_MODULES": MODULE, "TOKENIZERS_PARALLELISM": "false"}
    env.update(sample_rule_env())
    if device == "cpu":
        env.update({"VERL_PLATFORM": PLATFORM_NAME, "VERL_ENGINE_DEVICE": "cuda",
                    "OMP_NUM_THREADS": os.environ.get("AERO_VERL_THREADS", "1")})
    return env


def build_verl_config(cfg: RunConfig, out_dir: Path, device: str | None = None):
    """Data files, model directory, overrides and the composed + validated verl config for ``cfg``:
    its GPUs per node, nodes and rollout TP from ``cfg.resources``."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from trainer.verl.data import prepare
    from trainer.verl.model_dir import model_dir
    from trainer.verl.overrides import compose, to_overrides

    device = device or resolve_device(cfg)
    train, vals = prepare(cfg, out_dir)
    overrides = to_overrides(cfg, out_dir=out_dir, train_file=train, val_files=vals, model_dir=model_dir(cfg, out_dir),
                             n_gpus_per_node=run_gpus_per_node(cfg), nnodes=cfg.resources.nodes,
                             tensor_parallel=cfg.resources.rollout_tp, device=device)
    overrides += [o for o in os.environ.get("AERO_VERL_OVERRIDES", "").split() if o]  # expert escape hatch
    config = compose(overrides)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return config


class PlatformTaskRunner:
    """The Ray task runner (verl's main_ppo_v0.TaskRunner, building an PlatformTrainer)."""

    def run(self, config, groups: list | None = None, gpu_ids: list[list[str]] | None = None) -> dict[str, Any]:
        """Train ``config`` on the run's placement ``groups`` (one per node), whose Ray GPU ids are
        ``gpu_ids`` (per group): the GPUs the step's system/gpu_* keys read, on every node."""
        from omegaconf import OmegaConf
        from verl.trainer.main_ppo_v0 import BaseTaskRunner
        from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
        from verl.utils.config import omega_conf_to_dataclass
        from verl.utils.dataset.rl_dataset import collate_fn
        from verl.workers.config import HFModelConfig

        from trainer.platform.system_metrics import NvmlGpus, RunGpus, SystemMonitor
        from trainer.verl.step_metrics import StopRequested, stop_file_flag
        from trainer.verl.trainer import PlatformTrainer

        OmegaConf.resolve(config)
        out_dir = Path(config.aero_lab.out_dir)
        run_cfg = parse_run_config(json.loads((out_dir / "config.json").read_text()))
        roles = BaseTaskRunner()
        _, wg_cls = roles.add_actor_rollout_worker(config)
        roles.add_critic_worker(config)
        roles.add_reward_model_resource_pool(config)
        model_config: HFModelConfig = omega_conf_to_dataclass(config.actor_rollout_ref.model)
        tokenizer, processor = model_config.tokenizer, model_config.processor
        train_ds = create_rl_dataset(config.data.train_files, config.data, tokenizer, processor, is_train=True)
        val_ds = create_rl_dataset(config.data.val_files, config.data, tokenizer, processor, is_train=False)
        sink = JsonlSink(out_dir / "verl")
        # the run's GPUs on each of its nodes (not this actor's node's); none known, or a run on the
        # CPU (its GPUs are logical): no GPU keys, and no reader process per node
        on_gpus = groups and gpu_ids and config.trainer.get("device", "cuda") != "cpu"
        gpus = RunGpus(groups, gpu_ids) if on_gpus else NvmlGpus([])
        if isinstance(gpus, RunGpus):
            gpus.start()  # the readers start while verl builds its workers
        trainer = PlatformTrainer(
            config=config, tokenizer=tokenizer, processor=processor, role_worker_mapping=roles.role_worker_mapping,
            resource_pool_manager=held_pools(roles.init_resource_pool_mgr(config), groups),
            ray_worker_group_cls=wg_cls,
            train_dataset=train_ds, val_dataset=val_ds, collate_fn=collate_fn,
            train_sampler=create_rl_sampler(config.data, train_ds),
            run_cfg=run_cfg, sink=sink, should_stop=stop_file_flag(out_dir / "verl" / "STOP"),
            model_shape=model_shape(config.actor_rollout_ref.model.path), system=SystemMonitor(gpus=gpus))
        trainer.init_workers()
        try:
            trainer.fit()
        except StopRequested:
            pass
        return {"status": "stopped" if trainer.stopped else "completed",
                "last_step": trainer.platform_logger.last_step}


def held_pools(manager, groups: list | None):
    """verl's resource-pool manager over the placement groups the run already holds
    (trainer/platform/placement.py): its pools use them instead of making their own, and skip verl's
    "available GPUs less than desired" check (the held GPUs are the run's, not free)."""
    if groups is None:
        return manager
    from verl.single_controller.ray.base import sort_placement_group_by_node_ip

    class HeldPools(type(manager)):  # type: ignore[misc]
        def create_resource_pool(self):
            spec = list(self.resource_pool_spec.items())
            if len(spec) != 1 or len(spec[0][1]) != len(groups):
                raise RuntimeError(f"the run holds {len(groups)} node groups for one pool; verl asks for {spec}")
            self._check_resource_available = lambda: None
            super().create_resource_pool()
            pool = self.resource_pool_dict[spec[0][0]]
            pool.pgs = sort_placement_group_by_node_ip(groups)

    return HeldPools(resource_pool_spec=manager.resource_pool_spec, mapping=manager.mapping,
                     max_colocate_count=manager.max_colocate_count)


def runtime_env_of(config, env: dict[str, str]) -> dict[str, Any]:
    """The run's own Ray runtime environment: verl's, plus our plugins and trackers (env)."""
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    runtime_env = OmegaConf.to_container(OmegaConf.create(get_ppo_ray_runtime_env(config)))
    runtime_env.setdefault("env_vars", {}).update(env)
    return runtime_env


def run_verl(cfg: RunConfig, out_dir: str | Path, sink: MetricSink,
             should_stop: Callable[[], bool] | None = None,
             progress: Callable[[int, int, dict], None] | None = None,
             on_wait: Callable[[str | None], None] | None = None,
             on_placed: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Train ``cfg`` (engine 'verl', parsed by the caller) on a Ray cluster; the contract of
    trainer.platform.run.run_training. The run is a Ray job of its own (trainer/platform/placement.py): it
    holds one placement group per node until it ends, waits (``on_wait``) while they are taken,
    and frees only what it made."""
    check_verl_config(cfg)
    try:
        import ray  # noqa: F401  (fail here, with what to install, before any data is written)
    except ImportError as e:
        raise ImportError("the verl engine needs verl: pip install 'aero-lab[verl]' (verl==0.9.1)") from e
    from trainer.platform.placement import (Placement, check_network, check_shared_dir, cluster_address, describe_groups,
                                            forwarded_env, node_groups, ray_session, release_groups)

    if cfg.resources.nodes > 1 and cluster_address() is None:
        raise ConfigError([("resources.nodes", f"{cfg.resources.nodes} nodes need a Ray cluster of several nodes: the "
                            "operator sets AERO_RAY_ADDRESS on the worker (docs/scale.md); without it a run has a Ray "
                            "of its own, on one host")])
    out_dir = Path(out_dir)
    (out_dir / "verl").mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    stop_file = out_dir / "verl" / "STOP"
    stop_file.unlink(missing_ok=True)
    device = resolve_device(cfg)
    # verl's own trackers (trainer/platform/trackers.py), and the operator's network settings for every rank
    network = forwarded_env()
    env = {**platform_env(device), **verl_env(cfg.trackers, out_dir), **network}
    os.environ.update(env)  # this process too: verl reads VERL_PLATFORM when it first asks for the platform
    from trainer.verl.plugins import register

    register()
    config = build_verl_config(cfg, out_dir, device=device)
    gpus, nodes = int(config.trainer.n_gpus_per_node), int(config.trainer.nnodes)
    if device == "cuda" and cluster_address() is None:  # a Ray of its own declares only GPUs that exist
        import torch

        if gpus * nodes > (seen := torch.cuda.device_count()):
            raise ConfigError([("resources.gpus_per_node", f"the run asks for {gpus * nodes} GPU(s) and this host sees "
                                f"{seen}, with no Ray cluster to place them on (AERO_RAY_ADDRESS): ask for at most {seen}")])
    t0 = time.monotonic()
    with ray_session(runtime_env_of(config, env), own_gpus=gpus * nodes) as cluster:
        groups = node_groups(gpus, nodes, should_stop, on_wait)
        if groups is None:  # stopped while it waited: nothing trained
            return {"status": "stopped", "last_step": None, "final_eval": None, "n_params": None, "data_pos": None}
        try:
            where = Placement(cluster, *describe_groups(groups), waited_s=time.monotonic() - t0)
            if len(set(where.nodes)) > 1:
                check_shared_dir(groups, out_dir)
            where.network = check_network(groups, network)
            if on_wait is not None:
                on_wait(None)
            if on_placed is not None:
                on_placed(where.summary())
            result, relay, seen = _fit(cfg, config, out_dir, sink, groups, stop_file, should_stop, progress, where)
        finally:
            release_groups(groups)
    relay.pump()
    if progress is not None and relay.last_step > seen:
        progress(relay.last_step, cfg.steps, relay.last_metrics)
    sink.close()
    return {"status": result["status"], "last_step": max(result["last_step"], relay.last_step),
            "final_eval": relay.final_eval if result["status"] == "completed" else None,
            "n_params": model_shape(config.actor_rollout_ref.model.path)[0], "data_pos": None, "placement": where.summary()}


def _fit(cfg: RunConfig, config, out_dir: Path, sink: MetricSink, groups: list, stop_file: Path,
         should_stop: Callable[[], bool] | None, progress: Callable[[int, int, dict], None] | None,
         where=None):
    """The task runner's fit on the held groups, relaying its metrics to ``sink`` as they come.
    A node of the run (``where``, a trainer.platform.placement.Placement) that dies fails it with
    :class:`NodeLost` (:func:`check_nodes`), not a Ray traceback or a wait for gloo's timeout."""
    import ray

    from trainer.verl.step_metrics import JsonlRelay, latest_checkpoint_step

    resumed = latest_checkpoint_step(config.trainer.default_local_dir)
    if resumed:  # steps past the checkpoint are trained again: nothing of them may stay stored
        JsonlSink(out_dir / "verl").truncate_after(resumed)
        sink.truncate_after(resumed)
    relay = JsonlRelay(out_dir / "verl", sink)
    runner = ray.remote(num_cpus=1)(PlatformTaskRunner).remote()
    seen, checked = 0, time.monotonic()
    try:
        ref = runner.run.remote(config, groups, where.gpu_ids if where is not None else None)
        while not ray.wait([ref], timeout=POLL_S)[0]:
            relay.pump()
            if progress is not None and relay.last_step > seen:
                seen = relay.last_step
                progress(seen, cfg.steps, relay.last_metrics)
            if should_stop is not None and not stop_file.exists() and should_stop():
                stop_file.touch()
            if where is not None and time.monotonic() - checked > NODE_CHECK_S:  # a rank on a dead node may hang
                checked = time.monotonic()
                check_nodes(where, config, relay)
        try:
            result = ray.get(ref)
        except ray.exceptions.RayError as e:
            if where is not None:  # a Ray of the run's own ("own") is this host: it cannot lose a node and go on
                lost = died(e) and where.cluster != "own"
                check_nodes(where, config, relay, wait_s=NODE_DEATH_S if lost else 0.0, cause=e)
            raise
    finally:
        ray.kill(runner, no_restart=True)  # its worker, rollout and agent-loop actors die with it
    return result, relay, seen


NODE_CHECK_S = 2.0  # how often the launcher checks that the run's nodes are alive
NODE_DEATH_S = 60.0  # after a Ray actor of the run died: how long Ray may take to declare its node dead
# what a rank's error says when a peer process is gone (Ray's errors by name; gloo's socket errors)
PEER_LOST = ("ActorDiedError", "NodeDiedError", "ActorUnavailableError", "Connection closed by peer",
             "Connection reset by peer")


def died(error: BaseException) -> bool:
    """Whether ``error`` (a Ray error, maybe a task error wrapping others) says an actor, worker
    or object of the run was lost, as when its node dies."""
    import ray.exceptions as rex

    lost = (rex.RayActorError, rex.NodeDiedError, rex.WorkerCrashedError, rex.ObjectLostError, rex.OwnerDiedError,
            rex.ActorUnavailableError)
    seen, todo = set(), [error]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, lost) or any(n in str(e) for n in PEER_LOST):
            return True
        todo += [getattr(e, "cause", None), e.__cause__, e.__context__]
    return False


def lost_nodes(where) -> list[tuple[str, str]]:
    """(node id, IP) of each of the run's nodes (``where.nodes``) that Ray no longer lists as alive."""
    import ray

    alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    return [(node, ip) for node, ip in zip(where.nodes, where.node_ips) if node not in alive]


def check_nodes(where, config, relay, wait_s: float = 0.0, cause: BaseException | None = None) -> None:
    """Raise :class:`NodeLost` naming each of the run's nodes that is gone (its IP and Ray node
    id) and the checkpoint a retry resumes from; with ``wait_s``, give Ray that long to notice
    (it declares a node dead after its health checks fail, ~15 s). Relays the steps logged so far
    first, so the sink holds every trained step, once."""
    from trainer.verl.step_metrics import latest_checkpoint_step

    deadline = time.monotonic() + wait_s
    while not (lost := lost_nodes(where)) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    if not lost:
        return
    relay.pump()
    step = latest_checkpoint_step(config.trainer.default_local_dir)
    names = ", ".join(f"{ip} (Ray node id {node})" for node, ip in lost)
    resume = (f"from its last checkpoint, step {step}" if step else
              "from its last checkpoint; it has none yet, so from step 1")
    raise NodeLost(f"node {names} of the run's {len(where.nodes)} nodes left the Ray cluster after step "
                   f"{relay.last_step}: its FSDP ranks and rollout server died with it. Retried, the run resumes "
                   f"{resume} (checkpoints are in the shared run directory)") from cause
