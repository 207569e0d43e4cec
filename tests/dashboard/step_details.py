"""Seeding helpers for the step-detail tests (Rollouts view, key picker, heatmaps): stored
rollout samples and histograms shaped as trainer/platform/step_detail.py writes them."""

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


# A real model's rollout (smollm2-135m on countdown): the chat template's system prompt and the
# question in words, decoded without special tokens, and free-text answers with long words.
CHAT_PROMPT = ("system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face\nuser\nUsing the numbers "
               "6, 8, 3 and 9, each at most once, and + - * / with parentheses, write an expression equal to 48. "
               "Answer with just the expression.\nassistant\n")
CHAT_ANSWERS = ("(9 - 3) * 8 = 48", "To solve this, we multiply 6 by 8: 6 * 8 = 48. The answer is 6 * 8.",
                "Supercalifragilisticexpialidocious" * 6, "48")


def chat_detail(step: int) -> dict:
    """``detail(step)`` with every prompt and response a real model's (module constants)."""
    d = detail(step)
    for i, r in enumerate(d["rollouts"]):
        r["prompt"], r["response"] = CHAT_PROMPT, CHAT_ANSWERS[i % len(CHAT_ANSWERS)]
    return d


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


def add_details(db_url: str, run_id: int, steps: range, *, system: bool = True, chat: bool = False) -> None:
    """Step details for ``steps`` (``chat``: a real model's text) and, with ``system``, system/*
    metrics merged into those steps."""
    with session_scope(db_url) as s:
        upsert_step_details(s, run_id, {t: (chat_detail if chat else detail)(t) for t in steps})
    if system:
        from tests.dashboard.conftest import fake_metrics  # the same step rows, with system/* added

        with session_scope(db_url) as s:
            upsert_step_metrics(s, run_id, {t: {**fake_metrics("aero", t, max(steps)), "system/cpu_percent": 150.0 + t,
                                                "system/rss_mb": 900.0 + 5 * t, "system/host_cpu_percent": 60.0}
                                            for t in steps})
