"""Every private verl name AERO Lab depends on, written against verl 0.9.1 (``VERL_VERSION``):
items 1-2 are used by this module's functions, items 3-4 by the modules they name. A verl
upgrade is checked here first: tests/trainer/verl/test_verl_private.py fails loudly when one of
these names moves, and when trainer/verl/trainer.py uses a private ``RayPPOTrainer`` method
item 3 does not list.

1. ``verl.workers.rollout.base._ROLLOUT_REGISTRY``: the hybrid worker builds its rollout
   adapter from ``(rollout.name, "async")`` through this dict, which has no public register
   call (the replica side has one, ``RolloutReplicaRegistry.register``). Used by
   :func:`register_rollout`.
2. The process-group backend string: verl 0.9.1 initialises every worker's default group with
   ``f"cpu:gloo,{device}:{backend}"``, which is ``"cpu:gloo,cpu:gloo"`` on the CPU platform and
   torch refuses it ("Duplicate device type cpu"). verl offers no hook, so on the CPU platform
   ``torch.distributed.init_process_group`` is wrapped to drop a duplicated device entry
   (``"cpu:gloo,cpu:gloo"`` -> ``"cpu:gloo"``); any other backend string passes unchanged.
   Used by :func:`patch_process_group_backend`.
3. Private methods of ``verl.trainer.ppo.ray_trainer.RayPPOTrainer``, used by its subclass
   ``PlatformTrainer`` (trainer/verl/trainer.py):
   overridden (:data:`TRAINER_OVERRIDES`): ``_save_checkpoint`` and ``_load_checkpoint`` (the
   curation-state file beside verl's checkpoint), ``_val_metrics_update`` (the platform's eval
   results), ``_update_actor`` (a curated batch's mini-batch layout; the stock loop's accounting);
   called (:data:`TRAINER_CALLS`): ``_validate`` (``_timed_validate``), ``_get_gen_batch``
   (``_batches``), ``_get_dp_size``, ``_compute_old_log_prob`` and ``_compute_ref_log_prob``
   (``_update``); the overrides call verl's own through ``super()``, and ``fit_curated`` and
   ``_checkpoint_on_stop`` call ``_save_checkpoint`` / ``_load_checkpoint``.
4. Private attributes of ``verl.workers.rollout.replica.RolloutReplica``
   (:data:`REPLICA_ATTRIBUTES`): ``_server_address`` and ``_server_handle``, which a replica's
   ``launch_servers`` sets and verl reads through ``server_address`` / ``server_handle``; set by
   ``HFReplica.launch_servers`` (trainer/verl/plugins/hf_rollout.py).
"""

from __future__ import annotations

import functools
import os

VERL_VERSION = "0.9.1"
# Item 3 of the module docstring: RayPPOTrainer's private methods PlatformTrainer overrides or calls.
TRAINER_OVERRIDES = ("_save_checkpoint", "_load_checkpoint", "_val_metrics_update", "_update_actor")
TRAINER_CALLS = ("_validate", "_get_gen_batch", "_get_dp_size", "_compute_old_log_prob", "_compute_ref_log_prob")
# Item 4: RolloutReplica's private attributes HFReplica sets.
REPLICA_ATTRIBUTES = ("_server_address", "_server_handle")


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
