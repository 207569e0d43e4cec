"""Defense in depth: a worker re-checks the operator's run policy (its own settings) before any
compute, so a config that reached the store without the API's check (inserted directly, or
submitted before the operator tightened a cap) fails with the field named and trains nothing."""

from __future__ import annotations

import pytest

from backend.db.models import Run
from backend.db.runs import create_run
from backend.db.session import session_scope
from backend.settings import Settings
from trainer.spec.config import RunConfig
from trainer.spec.operator_policy import RunPolicy
from worker.runner import execute_run, run_dir
from worker.settings import WorkerSettings

WS = WorkerSettings(stale_after_s=60.0, heartbeat_s=5.0, max_attempts=3)


def get_run(url: str, run_id: int) -> Run:
    with session_scope(url) as s:
        return s.get(Run, run_id)


CODE_RUN = {"task": "code", "preset": None, "model_path": "/m", "train_data": "/d.jsonl"}


def insert(db_url, **changes) -> int:
    """Store a run config as-is, bypassing the API (and its policy check)."""
    config = RunConfig(steps=4, batch_prompts=4, n_total=4, max_new_tokens=8, eval_every=0, device="cpu",
                       aero=dict(n_explore=2, n_max=4, k_max=1)).model_dump(mode="json")
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = config
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    with session_scope(db_url) as s:
        return create_run(s, config, queue="cpu").id


@pytest.mark.parametrize("changes, field", [
    ({"code__network": "audit"}, "code.network"),
    ({"code__python": "/bin/sh"}, "code.python"),
    ({"code__run_as_uid": 0}, "code.run_as_uid"),
    ({**CODE_RUN, "code__memory_mb": 1_048_576}, "code.memory_mb"),  # the code task's own section
    ({**CODE_RUN, "code__max_processes": 100_000}, "code.max_processes"),
    ({"steps": 1_000_000}, "steps"),
    ({"aero__k": 1e308}, "aero.k"),
    ({"aero__k_max": 2**62}, "aero.k_max"),
    ({"preset": None, "model_path": "/etc/shadow"}, "model_path"),
    ({"preset": None, "model_path": "/proc/self/environ"}, "model_path"),
])
def test_worker_refuses_a_stored_config_outside_its_policy(db_url, tmp_path, changes, field):
    rid = insert(db_url, **changes)
    settings = Settings(data_dir=tmp_path / "data", database_url=db_url)
    assert execute_run(rid, settings, WS) == "failed"
    r = get_run(db_url, rid)
    assert r.status == "failed" and r.error.startswith("ConfigError: ") and f"{field}:" in r.error.splitlines()[0]
    assert not (run_dir(settings, rid) / "config.json").exists()  # refused before the loop started


def test_worker_uses_its_own_policy_not_the_api_one(db_url, tmp_path):
    """A cap the worker's operator lowered applies to runs the API accepted under the old one."""
    rid = insert(db_url, steps=4)
    settings = Settings(data_dir=tmp_path / "data", database_url=db_url, policy=RunPolicy(max_steps=3))
    assert execute_run(rid, settings, WS) == "failed"
    assert "steps: at most 3 (operator cap AERO_MAX_STEPS)" in get_run(db_url, rid).error
