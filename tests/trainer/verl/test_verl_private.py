"""The private verl names AERO Lab depends on (trainer/verl/plugins/verl_private.py) exist in the
installed verl, and the list is complete for PlatformTrainer: every private RayPPOTrainer
method trainer/verl/trainer.py overrides or calls is listed. A verl upgrade fails here first."""

import ast
import inspect
from pathlib import Path

import pytest

pytest.importorskip("verl")

from trainer.verl.plugins import verl_private  # noqa: E402

TRAINER_SOURCE = Path(__file__).resolve().parents[3] / "trainer" / "verl" / "trainer.py"


def test_the_installed_verl_is_the_version_the_names_were_written_against():
    import verl

    import trainer.verl

    assert verl.__version__ == verl_private.VERL_VERSION == trainer.verl.VERL_VERSION


def test_the_rollout_registry_and_the_replica_attributes_exist():
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry

    assert isinstance(base._ROLLOUT_REGISTRY, dict)
    assert all(isinstance(k, tuple) and len(k) == 2 for k in base._ROLLOUT_REGISTRY)  # (name, mode)
    assert callable(RolloutReplicaRegistry.register)
    # instance attributes: set in __init__ and read by the public properties
    init, source = inspect.getsource(RolloutReplica.__init__), inspect.getsource(RolloutReplica)
    for name in verl_private.REPLICA_ATTRIBUTES:
        assert f"self.{name}" in init and f"return self.{name}" in source, name


def test_the_listed_ray_ppo_trainer_methods_exist():
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    for name in verl_private.TRAINER_OVERRIDES + verl_private.TRAINER_CALLS:
        assert callable(getattr(RayPPOTrainer, name, None)), f"RayPPOTrainer.{name} is gone"


def _private_names_used(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(private methods PlatformTrainer defines, private attributes read on self or super())."""
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "PlatformTrainer")
    defined = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    used = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            on_self = isinstance(owner, ast.Name) and owner.id == "self"
            on_super = isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super"
            if on_self or on_super:
                used.add(node.attr)
    return {d for d in defined if d.startswith("_") and not d.startswith("__")}, used


def test_platform_trainer_uses_only_the_listed_private_methods():
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    defined, used = _private_names_used(ast.parse(TRAINER_SOURCE.read_text()))
    verl_names = {n for n in dir(RayPPOTrainer) if n.startswith("_") and not n.startswith("__")}
    assert defined & verl_names == set(verl_private.TRAINER_OVERRIDES)
    assert (used | defined) & verl_names == set(verl_private.TRAINER_OVERRIDES + verl_private.TRAINER_CALLS)


def test_dedupe_backend_keeps_the_first_entry_of_each_device():
    assert verl_private.dedupe_backend("cpu:gloo,cpu:gloo") == "cpu:gloo"
    assert verl_private.dedupe_backend("cpu:gloo,cuda:nccl") == "cpu:gloo,cuda:nccl"
    assert verl_private.dedupe_backend("nccl") == "nccl" and verl_private.dedupe_backend(None) is None
