"""Launch a platform run on verl (Ray): ``run_verl(cfg, out_dir, sink, should_stop)``.

Same contract as ``trainer.embedded.loop.run_training``: validates the config, writes OUT/config.json,
logs every step to ``sink`` (``log``/``log_eval``), resumes from OUT's latest checkpoint
(verl's own, OUT/verl_checkpoints), polls ``should_stop`` and returns
``{"status": "completed" | "stopped", "last_step", "final_eval", "n_params", "data_pos"}``.

    launcher (worker process)               Ray task-runner actor (AeroTaskRunner)
    -------------------------               --------------------------------------
    data -> OUT/verl_data/*.parquet
    overrides -> hydra compose + checks
    ray.init; runner.run.remote(config) --> register the "aero" estimator (here, in the actor)
                                            build datasets, AEROTrainer, workers; fit()
    relay OUT/verl/*.jsonl -> sink   <----  PlatformLogger -> JsonlSink(OUT/verl)
    should_stop() -> touch OUT/verl/STOP -> polled after each step: checkpoint, stop

The actor may run on another node: OUT must be on a filesystem every node sees.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from trainer.config import ConfigError, RunConfig, parse_run_config
from trainer.sinks import JsonlSink, MetricSink

POLL_S = 2.0


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
    assert cfg.engine == "verl" and cfg.model_path is not None, "parse_run_config admits verl configs only so"
    if not (Path(cfg.model_path).expanduser() / "config.json").is_file():
        raise ConfigError([("model_path", f"{cfg.model_path} is not a local model directory (no config.json); "
                            "nothing is downloaded")])


def build_verl_config(cfg: RunConfig, out_dir: Path, n_gpus_per_node: int | None = None, nnodes: int = 1):
    """Data files, overrides and the composed + validated verl config for ``cfg``."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from trainer.verl.data import prepare
    from trainer.verl.overrides import compose, to_overrides

    train, vals = prepare(cfg.train_data, cfg.benchmarks, out_dir)
    if n_gpus_per_node is None:
        import torch

        n_gpus_per_node = int(os.environ.get("AERO_VERL_GPUS", torch.cuda.device_count() or 1))
    overrides = to_overrides(cfg, out_dir=out_dir, train_file=train, val_files=vals, n_gpus_per_node=n_gpus_per_node,
                             nnodes=nnodes)
    overrides += [o for o in os.environ.get("AERO_VERL_OVERRIDES", "").split() if o]  # expert escape hatch
    config = compose(overrides)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return config


class AeroTaskRunner:
    """The Ray task runner (verl's main_ppo_v0.TaskRunner, building an AEROTrainer)."""

    def run(self, config) -> dict[str, Any]:
        from omegaconf import OmegaConf
        from verl.trainer.main_ppo_v0 import BaseTaskRunner
        from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
        from verl.utils.config import omega_conf_to_dataclass
        from verl.utils.dataset.rl_dataset import collate_fn
        from verl.workers.config import HFModelConfig

        from trainer.verl import estimator
        from trainer.verl.step_metrics import StopRequested, stop_file_flag
        from trainer.verl.trainer import AEROTrainer

        estimator.register()  # in THIS process: compute_advantage runs here
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
        trainer = AEROTrainer(
            config=config, tokenizer=tokenizer, processor=processor, role_worker_mapping=roles.role_worker_mapping,
            resource_pool_manager=roles.init_resource_pool_mgr(config), ray_worker_group_cls=wg_cls,
            train_dataset=train_ds, val_dataset=val_ds, collate_fn=collate_fn,
            train_sampler=create_rl_sampler(config.data, train_ds),
            run_cfg=run_cfg, sink=sink, should_stop=stop_file_flag(out_dir / "verl" / "STOP"),
            model_shape=model_shape(run_cfg.model_path))
        trainer.init_workers()
        try:
            trainer.fit()
        except StopRequested:
            pass
        return {"status": "stopped" if trainer.stopped else "completed",
                "last_step": trainer.platform_logger.last_step}


def run_verl(cfg: RunConfig, out_dir: str | Path, sink: MetricSink,
             should_stop: Callable[[], bool] | None = None,
             progress: Callable[[int, int, dict], None] | None = None) -> dict[str, Any]:
    """Train ``cfg`` (engine 'verl', parsed by the caller) on a Ray cluster; the contract of
    trainer.embedded.loop.run_training."""
    check_verl_config(cfg)
    try:
        import ray
    except ImportError as e:
        raise ImportError("the verl engine needs verl: pip install 'aero-lab[verl]' (verl==0.9.1)") from e
    from trainer.verl.step_metrics import JsonlRelay

    out_dir = Path(out_dir)
    (out_dir / "verl").mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    stop_file = out_dir / "verl" / "STOP"
    stop_file.unlink(missing_ok=True)
    config = build_verl_config(cfg, out_dir)
    if not ray.is_initialized():
        from omegaconf import OmegaConf
        from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

        ray.init(runtime_env=OmegaConf.to_container(OmegaConf.create(get_ppo_ray_runtime_env(config))))
    relay = JsonlRelay(out_dir / "verl", sink)
    ref = ray.remote(num_cpus=1)(AeroTaskRunner).remote().run.remote(config)
    seen = 0
    while not ray.wait([ref], timeout=POLL_S)[0]:
        relay.pump()
        if progress is not None and relay.last_step > seen:
            seen = relay.last_step
            progress(seen, cfg.steps, {})
        if should_stop is not None and not stop_file.exists() and should_stop():
            stop_file.touch()
    result = ray.get(ref)
    relay.pump()
    sink.close()
    return {"status": result["status"], "last_step": max(result["last_step"], relay.last_step),
            "final_eval": relay.final_eval if result["status"] == "completed" else None,
            "n_params": model_shape(cfg.model_path)[0], "data_pos": None}
