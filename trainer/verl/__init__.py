"""AERO, GRPO and DAPO on verl 0.9.1 (Ray, FSDP, vLLM or our HF rollout) for multi-GPU clusters,
and on a laptop CPU (trainer/verl/plugins).

Optional extra ``aero-lab[verl]`` (pinned verl==0.9.1), imported lazily: importing this package
does not import verl. Entry point for the worker: :func:`run_verl` (the contract of
``trainer.platform.run.run_training``), registered in trainer/spec/engine_registry.py. Modules:

    overrides   RunConfig -> verl hydra overrides (reward.* keys; legacy keys refused); compose
    data        the run's math files -> verl parquet (paper system prompt, benchmark names)
    reward      compute_score for verl's reward loop (math-verify, as the embedded engine)
    model_dir   the HF model directory a run trains (model_path, or the tiny preset exported)
    plugins     verl plugins: the CPU platform and the HF-generate rollout server
    rows        DataProto rows: generation padding to the agent-loop divisor, the update layout
    collect     one step's rollouts on DataProto (the method step, its advantages)
    metrics     accounting (generated vs trained tokens, FLOPs), verl -> platform keys, logger
    trainer     PlatformTrainer(RayPPOTrainer)
    runner      the Ray task runner and run_verl
    rules       the engine's submit-time rules (light: the config checks them)
"""

from __future__ import annotations

from typing import Any

VERL_VERSION = "0.9.1"


def run_verl(cfg, out_dir, sink, should_stop=None, progress=None, policy=None, on_wait=None,
             on_placed=None) -> dict[str, Any]:
    """The verl engine's run (the contract in trainer/platform/run.py): see
    :func:`trainer.verl.runner.run_verl` (imported lazily). ``policy`` is accepted for the
    contract; verl trains no task that runs the code sandbox (trainer/verl/rules.py)."""
    from trainer.verl.runner import run_verl as _run

    return _run(cfg, out_dir, sink, should_stop=should_stop, progress=progress, on_wait=on_wait, on_placed=on_placed)


__all__ = ["VERL_VERSION", "run_verl"]
