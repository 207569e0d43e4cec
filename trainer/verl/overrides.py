"""Translate a platform RunConfig into verl 0.9.1 hydra overrides (``key=value`` strings).

Pure stdlib: the overrides are built without verl installed; :func:`compose` (hydra, verl's
config directory) validates them where verl is installed.

verl 0.9.1 reads the reward settings from ``reward.*`` (``reward.custom_reward_function``,
``reward.reward_manager``); the legacy top-level ``custom_reward_function.*`` and
``reward_model.*`` keys still exist in its config tree (all null) but ``main_ppo`` never
migrates them, so a value put there is silently ignored and the run trains on verl's default
scorer. :func:`check_no_legacy_reward` refuses such overrides by name, and
:func:`compose` checks the composed tree again.

Mapping (RunConfig -> verl), method by method (the per-method bits come from the method's spec,
``MethodSpec.verl``, trainer/methods/):

    all      data.train_batch_size = batch_prompts; max_prompt/response_length; lr, warmup,
             grad clip, weight decay, betas; entropy_coeff; k3 KL as use_kl_loss + low_var_kl;
             ppo_mini_batch_size = batch_prompts / mini_batches (prompts); ppo_epochs;
             rollout temperature/top_p; validation samples eval_n at eval_temperature;
             trainer.use_v1 = False (the RayPPOTrainer path), total_training_steps = steps.
             model.use_remove_padding (verl's packed update) unless packed_update = off; the
             submit rules refuse packed_update = on off CUDA.
    rollout  rollout.name = the sampler spec's verl_rollout: aero_hf (our HF-generate server) for
             sampler 'hf', vllm for 'vllm'; on the CPU (device_overrides) FSDP2 on gloo in float32, SDPA, padded batches.
    grpo     rollout.n = n_total, adv_estimator = grpo, symmetric clip, seq-mean-token-mean.
    dapo     rollout.n = n_total, clip_ratio_low/high = eps_low/high, token-mean; dynamic
             sampling and overlong shaping are the DAPO step's (trainer/methods/dapo.py), run by
             the curated loop as on the embedded engine, so verl's filter_groups and 'dapo'
             reward manager stay off.
    aero*    rollout.n = n_explore (the exploration pass). Every method's own settings are read
             by PlatformTrainer (trainer/verl/trainer.py) from OUT/config.json
             (``+aero_lab.out_dir``).
    curated  (every method that is not ``verl.stock_fit``: DAPO, AERO, ...): the reward manager is
             'naive' (the verifier's reward) and the update trains on the step's advantages
             (trainer/verl/collect.py), never a verl estimator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from trainer.spec.config import RunConfig
from trainer.methods.spec import get_method
from trainer.spec.sampler_registry import get_sampler
from trainer.tasks.registry import get_task_spec
from trainer.platform.trackers import TrackerSettings

REWARD_FN = Path(__file__).with_name("reward.py")
LEGACY_REWARD_PREFIXES = ("custom_reward_function.", "reward_model.")


def _v(value: Any) -> str:
    """A hydra override value: booleans lower-case, lists/dicts as JSON-ish literals, None as null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_v(v) for v in value) + "]"
    if isinstance(value, str):
        # quote anything hydra's grammar could misread (paths with '=' or ',', spaces)
        return json.dumps(value) if any(c in value for c in " ,=[]{}'\"") else value
    return repr(value) if isinstance(value, float) else str(value)


def rollout_name(cfg: RunConfig) -> str:
    """verl's ``rollout.name`` for ``cfg.rollout.sampler`` (its spec's ``verl_rollout``): our HF-generate
    server for 'hf' (trainer/verl/plugins/hf_rollout.py, the embedded engine's sampler, registered
    as ``trainer.verl.plugins.ROLLOUT_NAME``), verl's vLLM replica for 'vllm'."""
    return get_sampler(cfg.rollout.sampler).verl_rollout


CPU_SETTINGS: dict[str, Any] = {
    "trainer.device": "cpu",
    "actor_rollout_ref.actor.strategy": "fsdp2", "actor_rollout_ref.ref.strategy": "fsdp2",
    "+actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
    "actor_rollout_ref.model.use_remove_padding": False,
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype": "fp32",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype": "fp32",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype": "fp32",
    "actor_rollout_ref.rollout.agent.num_workers": 1,
    "reward.num_workers": 1,
    "data.dataloader_num_workers": 0,
}
"""What the CPU platform needs of verl's config (trainer/verl/plugins/cpu_platform.py): FSDP2 on
gloo in float32 (no bf16 on the CPU), SDPA attention (flash-attention is CUDA only) over padded
batches, one agent-loop and one reward worker (the CPU has few cores), and the dataloader in the
trainer process."""


def to_overrides(cfg: RunConfig, *, out_dir: str | Path, train_file: str | Path, val_files: list[str | Path],
                 model_dir: str | Path | None = None, n_gpus_per_node: int = 1, nnodes: int = 1,
                 agent_workers: int = 8, tensor_parallel: int = 1, gpu_memory_utilization: float = 0.5,
                 max_token_len_per_gpu: int | None = None, device: str = "cuda") -> list[str]:
    """verl overrides for ``cfg`` (see the module docstring for the mapping).

    ``train_file``/``val_files``: verl parquet files (trainer/verl/data.py writes them).
    ``model_dir``: the HF model directory (default ``cfg.model_path``; trainer/verl/model_dir.py
    exports the tiny preset). ``device``: "cuda" or "cpu" (:data:`CPU_SETTINGS`).
    ``max_token_len_per_gpu``: dynamic micro-batching budget (default ``cfg.micro_batch_tokens``, else
    max(4 x (prompt + response), 8192)).
    """
    P, spec = cfg.batch_prompts, get_method(cfg.method)
    # rules of the config (trainer.verl.rules.verl_issues), refused at submit
    assert (model_dir or cfg.model_path) is not None and P % cfg.mini_batches == 0, \
        "parse_run_config admits no such verl config"
    model_dir = Path(model_dir or cfg.model_path).expanduser()
    eps_low, eps_high = spec.clip_range(cfg)
    seq_len = cfg.max_prompt_tokens + cfg.max_new_tokens
    # dynamic micro-batches: the run's micro_batch_tokens (the embedded engine's budget, the same
    # meaning), else 4 sequences of the longest length and never fewer than 8192 tokens (the tiny
    # preset's 44-token rows would otherwise run 4 rows per micro-batch)
    tokens = max_token_len_per_gpu or cfg.micro_batch_tokens or max(4 * seq_len, 8192)
    steps_or = lambda every: every if every > 0 else cfg.steps  # noqa: E731  (0 = only at the end)
    o = {
        # data
        "data.train_files": [str(train_file)],
        "data.val_files": [str(v) for v in val_files] or [str(train_file)],
        "data.train_batch_size": P,
        "data.max_prompt_length": cfg.max_prompt_tokens,
        "data.max_response_length": cfg.max_new_tokens,
        "data.filter_overlong_prompts": True,
        "data.truncation": "error",
        # a generated task's stream is written in the run's order
        "data.shuffle": get_task_spec(cfg.task).source != "generated",
        "data.validation_shuffle": False,  # per-problem (n, c) are paired by position across runs (docs/comparisons.md)
        "data.seed": cfg.seed,
        # model + optimizer
        "actor_rollout_ref.model.path": str(model_dir),
        "actor_rollout_ref.model.enable_gradient_checkpointing": cfg.gradient_checkpointing,
        # packed_update: verl's packed (padding-free) update; "auto" packs on CUDA, CPU_SETTINGS pad on the CPU
        "actor_rollout_ref.model.use_remove_padding": cfg.packed_update != "off",
        "actor_rollout_ref.actor.optim.lr": cfg.optim.lr,
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": cfg.optim.warmup_ratio,
        # verl: a negative lr_warmup_steps defers to the ratio, as warmup_steps=null does here
        "actor_rollout_ref.actor.optim.lr_warmup_steps": -1 if cfg.optim.warmup_steps is None else cfg.optim.warmup_steps,
        "actor_rollout_ref.actor.optim.weight_decay": cfg.optim.weight_decay,
        "actor_rollout_ref.actor.optim.betas": [cfg.optim.beta1, cfg.optim.beta2],
        "actor_rollout_ref.actor.optim.clip_grad": cfg.optim.grad_clip,
        "actor_rollout_ref.actor.grad_clip": cfg.optim.grad_clip,
        # policy loss
        "actor_rollout_ref.actor.ppo_mini_batch_size": P // cfg.mini_batches,
        "actor_rollout_ref.actor.ppo_epochs": cfg.ppo_epochs,
        "actor_rollout_ref.actor.use_dynamic_bsz": True,
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": tokens,
        "actor_rollout_ref.actor.clip_ratio_low": eps_low,
        "actor_rollout_ref.actor.clip_ratio_high": eps_high,
        "actor_rollout_ref.actor.loss_agg_mode": cfg.effective_loss_agg,
        # seq-mean-token-sum-norm's constant: the generation budget, on both engines (Dr.GRPO)
        "actor_rollout_ref.actor.loss_scale_factor": cfg.max_new_tokens,
        "actor_rollout_ref.actor.entropy_coeff": cfg.entropy_coef,
        "actor_rollout_ref.actor.use_kl_loss": cfg.kl_coef > 0,
        "actor_rollout_ref.actor.kl_loss_coef": cfg.kl_coef,
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",  # verl's name for the k3 estimator
        "actor_rollout_ref.actor.data_loader_seed": cfg.seed,
        # rollout (vLLM)
        "actor_rollout_ref.rollout.name": rollout_name(cfg),
        "actor_rollout_ref.rollout.n": spec.verl.first_call_n(cfg),  # AERO: its exploration size
        "actor_rollout_ref.rollout.temperature": cfg.temperature,
        "actor_rollout_ref.rollout.top_p": cfg.top_p,
        "actor_rollout_ref.rollout.seed": cfg.seed,
        # request ids det-<sample index>, routed to one replica: our HF server keys each sample's
        # draws by them (trainer/verl/plugins/hf_rollout.py), so a seed gives the same tokens
        "actor_rollout_ref.rollout.full_determinism": get_sampler(cfg.rollout.sampler).verl_full_determinism,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": tensor_parallel,
        "actor_rollout_ref.rollout.gpu_memory_utilization": gpu_memory_utilization,
        "actor_rollout_ref.rollout.agent.num_workers": agent_workers,
        "actor_rollout_ref.rollout.val_kwargs.n": cfg.eval_n,
        "actor_rollout_ref.rollout.val_kwargs.temperature": cfg.eval_temperature,
        "actor_rollout_ref.rollout.val_kwargs.top_p": cfg.top_p,
        "actor_rollout_ref.rollout.val_kwargs.do_sample": cfg.eval_temperature > 0,
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": tokens,
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": tokens,
        # advantage
        "algorithm.adv_estimator": spec.verl.adv_estimator,
        "algorithm.norm_adv_by_std_in_grpo": spec.divides_by_std(cfg),
        "algorithm.use_kl_in_reward": False,
        # reward: the reward.* keys verl 0.9.1 reads (never the legacy top-level ones)
        "reward.custom_reward_function.path": str(REWARD_FN),
        "reward.custom_reward_function.name": "compute_score",
        "reward.reward_manager.name": "naive",  # the verifier's reward; DAPO shapes it in its step
        # trainer
        "trainer.use_v1": False,
        "trainer.n_gpus_per_node": n_gpus_per_node,
        "trainer.nnodes": nnodes,
        "trainer.total_training_steps": cfg.steps,
        "trainer.total_epochs": 1_000_000,  # steps bound the run, not epochs
        # the platform logger is attached by PlatformTrainer; the run's trackers are verl's own
        # loggers (trainer/platform/trackers.py verl_env points them at the run directory)
        "trainer.logger": ["console", *TrackerSettings().chosen(cfg.trackers)],
        "trainer.project_name": "aero-lab",
        "trainer.experiment_name": cfg.name or cfg.method,
        "trainer.default_local_dir": str(Path(out_dir) / "verl_checkpoints"),
        "trainer.save_freq": steps_or(cfg.checkpoint_every),
        # verl deletes each older step's actor/ folder; PlatformTrainer the rest of it. One more
        # than kept: a new checkpoint is committed (and older ones pruned) only once its step is
        # logged, and until then the resume falls back on the newest committed one
        "trainer.max_actor_ckpt_to_keep": cfg.keep_checkpoints + 1,
        "trainer.test_freq": steps_or(cfg.eval_every),
        "trainer.val_before_train": cfg.eval_every > 0,
        "trainer.resume_mode": "auto",
        "trainer.balance_batch": True,
    }
    if cfg.preset is not None:  # the single-turn loop without a model-type hint (trainer/verl/plugins/agent_loop.py)
        from trainer.verl.model_dir import AGENT_LOOPS_FILE, EXPORT_DIR
        from trainer.verl.plugins import CHAR_AGENT_LOOP

        o["actor_rollout_ref.rollout.agent.agent_loop_config_path"] = str(Path(out_dir) / EXPORT_DIR / AGENT_LOOPS_FILE)
        o["actor_rollout_ref.rollout.agent.default_agent_loop"] = CHAR_AGENT_LOOP
    if device == "cpu":
        o.update(CPU_SETTINGS)
    out = [f"{k}={_v(v)}" for k, v in o.items()]
    # the platform run directory: PlatformTrainer reads OUT/config.json (strategies, curation,
    # accounting) and writes OUT/metrics.jsonl there
    out.append(f"+aero_lab.out_dir={_v(str(out_dir))}")
    return out


def check_no_legacy_reward(overrides: Iterable[str]) -> None:
    """Refuse overrides of the legacy reward keys verl 0.9.1 silently ignores (module docstring)."""
    bad = [o for o in overrides if o.lstrip("+~").startswith(LEGACY_REWARD_PREFIXES)]
    if bad:
        raise ValueError("verl 0.9.1 ignores the legacy reward keys " + ", ".join(bad) +
                         "; use reward.custom_reward_function.* / reward.reward_manager.* / reward.reward_model.*")


def compose(overrides: list[str]):
    """Compose verl's ``ppo_trainer`` config with ``overrides`` (hydra; needs verl installed) and
    check that no legacy reward key carries a value. Returns the DictConfig."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    check_no_legacy_reward(overrides)
    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = hydra_compose(config_name="ppo_trainer", overrides=list(overrides))
    legacy = {k: v for k, v in _leaves(OmegaConf.to_container(cfg.get("custom_reward_function") or {})).items()
              if v is not None and k != "name"}
    legacy.update({k: v for k, v in _leaves(OmegaConf.to_container(cfg.get("reward_model") or {})).items()
                   if v is not None})
    if legacy:
        raise ValueError(f"legacy reward keys carry values verl 0.9.1 would ignore: {legacy}")
    return cfg


def _leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for k, v in tree.items():
            out.update(_leaves(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): tree}
