"""POST /api/sweeps: validate every grid point, then store the sweep and its runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.orm import Session

from backend.db import runs as repo
from backend.db.models import Run, Sweep
from backend.db.sweeps import create_sweep, discard_sweep
from backend.queue import Enqueuer
from backend.services.configs import queue_for, run_gpus, validate_config
from backend.services.sweeps import MAX_RUNS_PER_SWEEP, expand_grid, run_name
from common.dotted import flatten, nest
from trainer.spec.config import ConfigError, RunConfig, SharedConfig, for_method, unread_sections
from trainer.spec.operator_policy import RunPolicy


class SweepConfigError(Exception):
    """A grid point's config is invalid. ``loc`` is the body location it came from."""

    def __init__(self, error: ConfigError, loc: list[str | int]):
        self.error, self.loc = error, loc
        super().__init__(f"{loc}: {error}")


class SweepTooLarge(ValueError):
    pass


class SweepEnqueueError(RuntimeError):
    """The broker refused one of the sweep's tasks; the sweep and its runs were removed."""

    def __init__(self, run_id: int, cause: BaseException):
        self.run_id, self.cause = run_id, cause
        super().__init__(f"could not enqueue run {run_id} of the sweep ({type(cause).__name__}: {cause}); "
                         "the sweep was not created: nothing was stored")


def enqueue_sweep(session: Session, enqueue: Enqueuer, sweep: Sweep, runs: list[Run]) -> None:
    """Send every run of a committed sweep, all or nothing: on the first refusal the sweep and
    all its runs are deleted (and committed) and :class:`SweepEnqueueError` raised. Tasks already
    sent then name a run that does not exist, which a worker skips (``worker.claim.acquire``).
    (A single ``POST /runs`` instead keeps its run, marked failed: ``services.submit``.)"""
    sweep_id = sweep.id
    for run in runs:
        try:
            enqueue(run.id, run.queue)
        except Exception as e:  # noqa: BLE001 - any broker error
            session.rollback()
            discard_sweep(session, sweep_id)
            session.commit()
            raise SweepEnqueueError(run.id, e) from e


def build_sweep(session: Session, *, name: str, base: SharedConfig, methods: list[str], seeds: list[int] | None,
                overrides: list[dict[str, Any]], tags: list[str], cpu_queue: str = "cpu", gpu_queue: str = "gpu",
                policy: RunPolicy | None = None, owner: str | None = None,
                admit: Callable[[Sequence[RunConfig]], None] | None = None,
                priority: int = 0) -> tuple[Sweep, list[Run]]:
    """Expand and validate the grid (all points, before writing anything), let ``admit`` refuse
    the whole grid (the caller's quotas: all or nothing), then insert the sweep and one queued
    run per point, owned by ``owner``, each of ``priority``. The caller commits and enqueues."""
    seeds = seeds or [base.seed]
    n = len(methods) * len(seeds) * len(overrides)
    if n > MAX_RUNS_PER_SWEEP:
        raise SweepTooLarge(f"{n} runs; at most {MAX_RUNS_PER_SWEEP} per sweep")
    base_json = base.model_dump(mode="json")
    try:
        if issues := unread_sections(base_json, methods):
            raise ConfigError(issues)
        for m in methods:
            validate_config(for_method(base_json, m), policy)
    except ConfigError as e:
        raise SweepConfigError(e, ["body", "base"]) from None
    for i, ov in enumerate(overrides):
        if issues := unread_sections(nest(flatten(ov)), methods):
            raise SweepConfigError(ConfigError(issues), ["body", "overrides", i])
    points, configs = expand_grid(base_json, methods, seeds, overrides), []
    for p in points:
        try:
            configs.append(validate_config(p.config, policy))
        except ConfigError as e:
            raise SweepConfigError(e, ["body", "overrides", p.override_index]) from None
    if admit is not None:
        admit(configs)
    spec = {"base": base_json, "methods": methods, "seeds": seeds, "overrides": overrides, "tags": tags}
    sweep = create_sweep(session, name, spec, owner=owner)
    runs = [
        repo.create_run(session, cfg.model_dump(mode="json"), queue=queue_for(cfg, cpu_queue, gpu_queue),
                        name=run_name(name, p, len(overrides)), tags=tags, sweep_id=sweep.id, owner=owner,
                        gpus=run_gpus(cfg), priority=priority)
        for p, cfg in zip(points, configs)
    ]
    return sweep, runs
