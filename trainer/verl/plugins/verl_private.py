"""The private verl names the plugins use, in one module. Written against verl 0.9.1
(``VERL_VERSION``); a verl upgrade is checked here first (tests/trainer/verl/test_plugins.py
fails loudly when one of these names moves).

Not here: the private methods of ``RayPPOTrainer`` that our subclass (trainer/verl/trainer.py)
overrides or calls, because they are that subclass's contract with verl and are read with it:
``_save_checkpoint``, ``_load_checkpoint``, ``_val_metrics_update``, ``_update_actor`` (overridden),
and ``_validate``, ``_get_gen_batch``, ``_get_dp_size``, ``_compute_old_log_prob``,
``_compute_ref_log_prob`` (called). A verl upgrade checks those there too.

1. ``verl.workers.rollout.base._ROLLOUT_REGISTRY``: the hybrid worker builds its rollout
   adapter from ``(rollout.name, "async")`` through this dict, which has no public register
   call (the replica side has one, ``RolloutReplicaRegistry.register``).
2. The process-group backend string: verl 0.9.1 initialises every worker's default group with
   ``f"cpu:gloo,{device}:{backend}"``, which is ``"cpu:gloo,cpu:gloo"`` on the CPU platform and
   torch refuses it ("Duplicate device type cpu"). verl offers no hook, so on the CPU platform
   ``torch.distributed.init_process_group`` is wrapped to drop a duplicated device entry
   (``"cpu:gloo,cpu:gloo"`` -> ``"cpu:gloo"``); any other backend string passes unchanged.
"""

from __future__ import annotations

import functools
import os

VERL_VERSION = "0.9.1"


def register_rollout(name: str, module: str) -> None:
    """Make ``rollout.name=<name>`` resolve to ``<module>.HFReplica`` (the Ray server side) and
    ``<module>.HFServerAdapter`` (the hybrid worker side)."""
    import importlib

    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register(name, lambda: importlib.import_module(module).HFReplica)
    base._ROLLOUT_REGISTRY[(name, "async")] = f"{module}.HFServerAdapter"


def dedupe_backend(backend: str | None) -> str | None:
    """``"cpu:gloo,cpu:gloo"`` -> ``"cpu:gloo"``: the first entry of each device type wins."""
    if not backend or "," not in backend:
        return backend
    seen: dict[str, str] = {}
    for part in backend.split(","):
        device, _, impl = part.partition(":")
        seen.setdefault(device.strip(), part.strip())
    return ",".join(seen.values())


def patch_process_group_backend() -> None:
    """On the CPU platform (``VERL_PLATFORM=cpu``), wrap torch's ``init_process_group`` with
    :func:`dedupe_backend` (module docstring, item 2). Idempotent."""
    import torch.distributed as dist

    if os.environ.get("VERL_PLATFORM", "").strip().lower() != "cpu" or getattr(dist.init_process_group,
                                                                                "_aero_dedupe", False):
        return
    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = dedupe_backend(kwargs["backend"])
        elif args:
            args = (dedupe_backend(args[0]), *args[1:])
        return original(*args, **kwargs)

    init_process_group._aero_dedupe = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group
