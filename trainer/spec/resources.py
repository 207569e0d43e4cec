"""What a run asks of the cluster: GPUs per node, nodes and the rollout's tensor parallelism.

The ``resources`` section of a run config (``RunConfig.resources``), its submit-time rules and
the numbers placement needs. pydantic and the stdlib only: the API validates configs with it.

A GPU here is a slot Ray hands out (``num_gpus``), one per FSDP rank on the verl engine. On a
CUDA run it is a device (Ray sets ``CUDA_VISIBLE_DEVICES``); on ``device=cpu`` it is a logical
GPU: verl still places one gloo rank per GPU, and a worker that owns logical GPUs places CPU runs
exactly as it would place GPU runs (tests and benchmarks of placement run that way). Who owns
which GPUs is the operator's setting (the worker's ``--gpus``, or the Ray cluster it joins),
never the submitter's (docs/scale.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from trainer.spec.config_types import Cap, Strict
from trainer.spec.engine_registry import engines_that, get_engine
from trainer.spec.sampler_registry import either, get_sampler, samplers_that

if TYPE_CHECKING:
    from trainer.spec.config import RunConfig


class ResourcesConfig(Strict):
    """GPUs and nodes one run holds while it trains (docs/scale.md)."""

    gpus_per_node: int | None = Field(
        None, ge=0, le=1024, description="GPUs the run holds on each of its nodes; on the verl engine one FSDP rank "
        "each (data-parallel size = gpus_per_node x nodes). null = 1 on the verl engine and for an embedded run "
        "on CUDA, 0 for an embedded run on the CPU. On device=cpu a GPU is a logical slot Ray places (a gloo rank on "
        "verl), with no device behind it. The embedded engine trains on one device: at most 1.")
    nodes: Annotated[int, Cap("max_nodes", "AERO_MAX_NODES", 1, "Cap on resources.nodes: a run over several nodes needs "
                              "the operator's Ray cluster (AERO_RAY_ADDRESS) and a run directory every node sees, so it "
                              "is opt-in.")] = Field(1, ge=1, le=1024, description="Nodes of the Ray cluster the run spans, gpus_per_node GPUs on "
                       "each (verl's trainer.nnodes). More than 1 needs the verl engine, the operator's Ray cluster "
                       "(AERO_RAY_ADDRESS) and a run directory every node sees.")
    rollout_tp: int = Field(1, ge=1, le=64, description="Tensor parallelism of each vLLM rollout replica (verl's "
                            "rollout.tensor_model_parallel_size; paper-scale 7B: 2-4). Must divide gpus_per_node. The "
                            "HF rollout server (sampler=hf) runs whole replicas: 1.")


def gpus_per_node(cfg: RunConfig, cuda: bool) -> int:
    """GPUs per node the run holds: ``resources.gpus_per_node`` when set, else 1 on verl and for an
    embedded run that trains on CUDA (``device=cuda``, or ``auto`` where ``cuda`` is available),
    else 0."""
    if cfg.resources.gpus_per_node is not None:
        return cfg.resources.gpus_per_node
    on_cuda = cfg.device == "cuda" or (cfg.device == "auto" and cuda)
    return 1 if get_engine(cfg.engine).distributed or on_cuda else 0


def resolve_gpus(cfg: RunConfig, verl_gpus: int = 1) -> RunConfig:
    """``cfg`` with its GPUs per node worked out once, at the boundary that parses it with the
    operator's policy (the API at submit), so the cap, the quota, the rules, ``runs.gpus``, the
    worker and the engine all read the one stored value: ``resources.gpus_per_node`` as set, else
    the operator's default for a distributed engine (``verl_gpus``, AERO_VERL_GPUS), 1 for an
    embedded run on CUDA and 0 for one on the CPU. An embedded ``device=auto`` run stays unset:
    its worker decides the device (and counts 1 GPU once it places it on one)."""
    if cfg.resources.gpus_per_node is not None:
        return cfg
    if get_engine(cfg.engine).distributed:
        n = verl_gpus
    elif cfg.device in ("cuda", "cpu"):
        n = 1 if cfg.device == "cuda" else 0
    else:
        return cfg
    return cfg.model_copy(update={"resources": cfg.resources.model_copy(update={"gpus_per_node": n})})


def gpus_held(cfg: RunConfig, cuda: bool) -> int:
    """All the GPUs the run holds: per node x nodes (what quotas and caps count)."""
    return gpus_per_node(cfg, cuda) * cfg.resources.nodes


def resource_issues(cfg: RunConfig) -> list[tuple[str, str]]:
    """The resources' submit-time rules, each naming the field to change: one device on the
    embedded engine; on verl, at least one rank and a rollout TP that divides a node's GPUs.

    No batch-size rule: verl asserts ``train_batch_size x n % n_gpus == 0`` only without dynamic
    micro-batching, which our verl runs always use, and the update lays each mini-batch out over
    the data-parallel ranks with masked pad rows (trainer/verl/rows.py ``pad_for_update``), so any
    batch splits over any number of ranks, training exactly the rows a one-rank run trains."""
    res, issues = cfg.resources, []
    if not get_engine(cfg.engine).distributed:
        use = " or ".join(f"engine={e}" for e in engines_that("distributed"))
        if (res.gpus_per_node or 0) > 1:
            issues.append(("resources.gpus_per_node", f"the {cfg.engine} engine trains on one device; got "
                           f"{res.gpus_per_node} GPUs. Use {use} for data-parallel training over several"))
        if res.nodes > 1:
            issues.append(("resources.nodes", f"the {cfg.engine} engine trains on one device of one node; use {use} "
                           "for several nodes"))
        if res.rollout_tp > 1:
            issues.append(("resources.rollout_tp", f"rollout tensor parallelism is for vLLM replicas over several GPUs; "
                           f"the {cfg.engine} engine samples on its one device: use {use} or rollout_tp=1"))
        if res.gpus_per_node == 0 and cfg.device == "cuda":
            issues.append(("resources.gpus_per_node", "a device=cuda run holds its GPU: set 1 (or null)"))
        return issues
    gpus = gpus_per_node(cfg, cuda=True)
    if gpus == 0:
        issues.append(("resources.gpus_per_node", f"the {cfg.engine} engine places one FSDP rank per GPU (a logical GPU "
                       "on device=cpu): at least 1"))
        return issues
    if res.rollout_tp > 1 and not get_sampler(cfg.rollout.sampler).tensor_parallel:
        issues.append(("resources.rollout_tp", f"the {get_sampler(cfg.rollout.sampler).label} rollout server (rollout.sampler="
                       f"{cfg.rollout.sampler}) runs whole replicas: rollout_tp=1, or "
                       f"{either(samplers_that('tensor_parallel'))} for tensor-parallel replicas"))
    elif gpus % res.rollout_tp:
        issues.append(("resources.rollout_tp", f"must divide gpus_per_node ({gpus}): a rollout replica's "
                       "tensor-parallel ranks sit on one node"))
    return issues
