"""Seeding helpers for the step-detail tests (Rollouts view, key picker, heatmaps): stored
rollout samples and histograms shaped as trainer/rollout_sample.py writes them."""

from __future__ import annotations

from backend.db.metrics import upsert_step_metrics
from backend.db.rollouts import upsert_step_details
from backend.db.session import session_scope

HOSTILE = "<b>bold?</b> <img src=x onerror=alert(1)> **not bold** :red[not red] [a](javascript:alert(1))"


def rollout(group: int, row: int, reward: float, stratum: str, stage: str, response: str, rnd: int = 0) -> dict:
    return {"group": group, "row": row, "prompt": f"{10 + group}+{group}=", "response": response, "reward": reward,
            "correct": reward > 0.5, "advantage": None if stage == "curated out" else round(reward - 0.25, 3),
            "stratum": stratum, "round": rnd, "stage": stage, "length": 4 + row % 3, "truncated": row == 2,
            "clipped": False}


def detail(step: int) -> dict:
    rows = [rollout(0, i, 0.0, "rescue", "explore" if i < 2 else "curated out", f"wrong {step}.{i}") for i in range(4)]
    rows.append(rollout(0, 4, 1.0, "rescue", "rescue 1", f"rescued {step}", rnd=1))
    rows += [rollout(1, 5 + i, float(i % 2), "high", "explore", HOSTILE if i == 0 else f"right {step}.{i}") for i in range(4)]
    pass_rate = [0] * 10
    pass_rate[0], pass_rate[min(9, 2 + step)] = 3, 5
    length = [0] * 16
    length[3 + step % 4] = 40
    return {"rollouts": rows, "histograms": {"pass_rate": {"lo": 0.0, "hi": 1.0, "counts": pass_rate},
                                              "length": {"lo": 0.0, "hi": 16.0, "counts": length}}}


def add_details(db_url: str, run_id: int, steps: range, *, system: bool = True) -> None:
    """Step details for ``steps`` and, with ``system``, system/* metrics merged into those steps."""
    with session_scope(db_url) as s:
        upsert_step_details(s, run_id, {t: detail(t) for t in steps})
    if system:
        from tests.dashboard.conftest import fake_metrics  # the same step rows, with system/* added

        with session_scope(db_url) as s:
            upsert_step_metrics(s, run_id, {t: {**fake_metrics("aero", t, max(steps)), "system/cpu_percent": 150.0 + t,
                                                "system/rss_mb": 900.0 + 5 * t, "system/host_cpu_percent": 60.0}
                                            for t in steps})
