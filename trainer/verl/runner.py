"""Launch a platform run on verl (Ray): ``run_verl(cfg, out_dir, sink, should_stop)``.

Same contract as ``trainer.engines.run_training``: validates the config, writes OUT/config.json,
logs every step to ``sink`` (``log``/``log_eval``), resumes from OUT's latest checkpoint
(verl's own, OUT/verl_checkpoints), polls ``should_stop`` and returns
``{"status": "completed" | "stopped", "last_step", "final_eval", "n_params", "data_pos"}``.

    launcher (worker process)               Ray task-runner actor (PlatformTaskRunner)
    -------------------------               --------------------------------------
    data -> OUT/verl_data/*.parquet
    overrides -> hydra compose + checks
    ray.init; runner.run.remote(config) --> build datasets, PlatformTrainer, workers; fit()
    relay OUT/verl/*.jsonl -> sink   <----  PlatformLogger -> JsonlSink(OUT/verl)
    should_stop() -> touch OUT/verl/STOP -> polled after each step: checkpoint, stop

The actor may run on another node: OUT must be on a filesystem every node sees.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from trainer.config import ConfigError, RunConfig, parse_run_config
from trainer.sinks import JsonlSink, MetricSink
from trainer.trackers import verl_env

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
    ``trainer.config.cross_field_issues``'s, so the API refuses them at submit; this one needs
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


def gpus_per_node(device: str) -> int:
    """Workers per node: ``AERO_VERL_GPUS``, else the launcher's GPU count (1 on the CPU: one FSDP
    worker, a logical Ray GPU)."""
    if os.environ.get("AERO_VERL_GPUS"):
        return int(os.environ["AERO_VERL_GPUS"])
    import torch

    return (torch.cuda.device_count() or 1) if device == "cuda" else 1


def sample_rule_env() -> dict[str, str]:
    """The operator's rollout-sample settings (AERO_ROLLOUT_*, trainer/operator_policy.py) as set here, for
    the trainer actor, which reads them with ``SampleRules.from_env``."""
    from trainer.operator_policy import ENV

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


def build_verl_config(cfg: RunConfig, out_dir: Path, n_gpus_per_node: int | None = None, nnodes: int = 1,
                      device: str | None = None):
    """Data files, model directory, overrides and the composed + validated verl config for ``cfg``."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from trainer.verl.data import prepare
    from trainer.verl.model_dir import model_dir
    from trainer.verl.overrides import compose, to_overrides

    device = device or resolve_device(cfg)
    train, vals = prepare(cfg, out_dir)
    n_gpus_per_node = n_gpus_per_node or gpus_per_node(device)
    overrides = to_overrides(cfg, out_dir=out_dir, train_file=train, val_files=vals, model_dir=model_dir(cfg, out_dir),
                             n_gpus_per_node=n_gpus_per_node, nnodes=nnodes, device=device)
    overrides += [o for o in os.environ.get("AERO_VERL_OVERRIDES", "").split() if o]  # expert escape hatch
    config = compose(overrides)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return config


class PlatformTaskRunner:
    """The Ray task runner (verl's main_ppo_v0.TaskRunner, building an PlatformTrainer)."""

    def run(self, config) -> dict[str, Any]:
        from omegaconf import OmegaConf
        from verl.trainer.main_ppo_v0 import BaseTaskRunner
        from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
        from verl.utils.config import omega_conf_to_dataclass
        from verl.utils.dataset.rl_dataset import collate_fn
        from verl.workers.config import HFModelConfig

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
        trainer = PlatformTrainer(
            config=config, tokenizer=tokenizer, processor=processor, role_worker_mapping=roles.role_worker_mapping,
            resource_pool_manager=roles.init_resource_pool_mgr(config), ray_worker_group_cls=wg_cls,
            train_dataset=train_ds, val_dataset=val_ds, collate_fn=collate_fn,
            train_sampler=create_rl_sampler(config.data, train_ds),
            run_cfg=run_cfg, sink=sink, should_stop=stop_file_flag(out_dir / "verl" / "STOP"),
            model_shape=model_shape(config.actor_rollout_ref.model.path))
        trainer.init_workers()
        try:
            trainer.fit()
        except StopRequested:
            pass
        return {"status": "stopped" if trainer.stopped else "completed",
                "last_step": trainer.platform_logger.last_step}


def start_ray(config, env: dict[str, str], device: str) -> None:
    """A local Ray (or the cluster RAY_ADDRESS names) with our environment in every worker; on the
    CPU, logical GPUs for verl's resource pools (they schedule workers, no device behind them)."""
    import ray
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    runtime_env = OmegaConf.to_container(OmegaConf.create(get_ppo_ray_runtime_env(config)))
    runtime_env.setdefault("env_vars", {}).update(env)
    kwargs: dict[str, Any] = {"runtime_env": runtime_env}
    if device == "cpu" and not os.environ.get("RAY_ADDRESS"):
        # logical resources: verl's bundles ask for max_colocate_count CPUs per worker, plus the
        # task runner, agent-loop and reward workers; threads are capped by OMP_NUM_THREADS
        kwargs["num_gpus"] = int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes)
        kwargs["num_cpus"] = max(os.cpu_count() or 1, 16)
    with real_std_streams():
        ray.init(**kwargs)


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


def release(runner) -> None:
    """End a run's Ray actors and placement groups: the task runner owns the worker, rollout and
    agent-loop actors (they die with it), and the resource pools it made must be freed for the
    next run on the same Ray (a worker process runs one run after another)."""
    import ray
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    ray.kill(runner, no_restart=True)
    for pg_id, info in ray.util.placement_group_table().items():
        if info.get("state") != "REMOVED":
            remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))


def run_verl(cfg: RunConfig, out_dir: str | Path, sink: MetricSink,
             should_stop: Callable[[], bool] | None = None,
             progress: Callable[[int, int, dict], None] | None = None) -> dict[str, Any]:
    """Train ``cfg`` (engine 'verl', parsed by the caller) on a Ray cluster; the contract of
    trainer.engines.run_training."""
    check_verl_config(cfg)
    try:
        import ray
    except ImportError as e:
        raise ImportError("the verl engine needs verl: pip install 'aero-lab[verl]' (verl==0.9.1)") from e
    from trainer.verl.step_metrics import JsonlRelay, latest_checkpoint_step

    out_dir = Path(out_dir)
    (out_dir / "verl").mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    stop_file = out_dir / "verl" / "STOP"
    stop_file.unlink(missing_ok=True)
    device = resolve_device(cfg)
    env = {**platform_env(device), **verl_env(cfg.trackers, out_dir)}  # verl's own trackers (trainer/trackers.py)
    os.environ.update(env)  # this process too: verl reads VERL_PLATFORM when it first asks for the platform
    from trainer.verl.plugins import register

    register()
    config = build_verl_config(cfg, out_dir, device=device)
    if not ray.is_initialized():
        start_ray(config, env, device)
    resumed = latest_checkpoint_step(config.trainer.default_local_dir)
    if resumed:  # steps past the checkpoint are trained again: nothing of them may stay stored
        JsonlSink(out_dir / "verl").truncate_after(resumed)
        sink.truncate_after(resumed)
    relay = JsonlRelay(out_dir / "verl", sink)
    runner = ray.remote(num_cpus=1)(PlatformTaskRunner).remote()
    try:
        ref = runner.run.remote(config)
        seen = 0
        while not ray.wait([ref], timeout=POLL_S)[0]:
            relay.pump()
            if progress is not None and relay.last_step > seen:
                seen = relay.last_step
                progress(seen, cfg.steps, relay.last_metrics)
            if should_stop is not None and not stop_file.exists() and should_stop():
                stop_file.touch()
        result = ray.get(ref)
    finally:
        release(runner)
    relay.pump()
    if progress is not None and relay.last_step > seen:
        progress(relay.last_step, cfg.steps, relay.last_metrics)
    sink.close()
    return {"status": result["status"], "last_step": max(result["last_step"], relay.last_step),
            "final_eval": relay.final_eval if result["status"] == "completed" else None,
            "n_params": model_shape(config.actor_rollout_ref.model.path)[0], "data_pos": None}
