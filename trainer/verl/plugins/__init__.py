"""AERO Lab's verl plugins: a CPU platform and an HF-generate rollout, registered through
verl's own hooks so verl's real ``RayPPOTrainer`` runs on a laptop CPU (and the HF rollout on
a GPU without vLLM).

verl imports this package in every one of its processes (the Ray task runner, the FSDP
actor/rollout/ref workers, the agent-loop and reward-loop workers) when
``VERL_USE_EXTERNAL_MODULES=trainer.verl.plugins`` is in the environment; the verl runner
(trainer/verl/runner.py) puts it into Ray's runtime environment. The ``verl.plugins`` entry
point in pyproject.toml does the same for an installed aero-lab. Importing it registers:

    platform "cpu"     cpu_platform.PlatformCPU, chosen with VERL_PLATFORM=cpu (never auto-detected)
    rollout "aero_hf"  hf_rollout.HFReplica (the Ray server actor) + hf_rollout.HFServerAdapter
                       (the hybrid worker's side: weight sync), chosen with rollout.name=aero_hf

Nothing of verl's installed files is edited; every private verl name the engine depends on
is listed in verl_private.py (which names the verl version it was written against) and pinned
by tests/trainer/verl/test_verl_private.py.
"""

from __future__ import annotations

ROLLOUT_NAME = "aero_hf"
CHAR_AGENT_LOOP = "aero_char_single_turn"  # agent_loop.py: the tiny preset's single-turn loop
CHAR_AGENT_LOOP_TARGET = "trainer.verl.plugins.agent_loop.CharSingleTurnAgentLoop"
PLATFORM_NAME = "cpu"
MODULE = __name__


def register() -> None:
    """Register the platform and the rollout with verl (idempotent)."""
    from trainer.verl.plugins import verl_private
    from trainer.verl.plugins.cpu_platform import register_platform

    register_platform()
    verl_private.register_rollout(ROLLOUT_NAME, "trainer.verl.plugins.hf_rollout")
    verl_private.patch_process_group_backend()


def _register_if_verl_loaded() -> None:
    """verl imports this module at the end of its own ``__init__``; a plain ``import
    trainer.verl.plugins`` without verl (the main test suite) registers nothing."""
    import sys

    if "verl" in sys.modules:
        register()


_register_if_verl_loaded()
