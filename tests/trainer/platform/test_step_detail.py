"""The stored rollout sample and histograms (trainer/platform/step_detail.py): the sample rule by
hand on a made-up step, the caps, hostile text, and the detail the embedded loop logs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainer.spec.config import parse_run_config
from trainer.platform.run import run_training
from trainer.spec.operator_policy import RunPolicy
from trainer.platform.step_detail import (LENGTH_BINS, PASS_BINS, SampleRules, StepRows, clip_text, fixed_histogram,
                                          group_strata, pick_groups, stage_of, step_detail, step_histograms)
from trainer.platform.sinks import JsonlSink, MemorySink, MultiSink


def aero_like_step() -> StepRows:
    """6 prompts x 4 explore rows; group 0 all-fail then rescued in round 1 (row 25 correct);
    group 1 all-fail and not rescued in round 1; groups 2-5 partial or all-correct."""
    group = [g for g in range(6) for _ in range(4)] + [0, 0, 1, 1]
    round_ = [0] * 24 + [1, 1, 1, 1]
    correct = [0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1] + [0, 1, 0, 0]
    n = len(group)
    return StepRows(group=np.array(group), round_=np.array(round_), reward=np.array(correct, dtype=float),
                    correct=np.array(correct, dtype=bool), length=np.arange(n) % 9, truncated=np.arange(n) % 5 == 0,
                    prompt_text=lambda i: f"prompt of row {i}", response_text=lambda i: f"response {i}",
                    version=np.full(n, 2))


def test_strata_from_each_groups_exploration():
    rows = aero_like_step()
    assert group_strata(rows.group, rows.round_, rows.correct, S=0, tau=0.5) == {0: 0, 1: 0, 2: 1, 3: 2, 4: 2, 5: 2}


def test_every_rescued_group_first_then_random_prompts():
    rows = aero_like_step()
    strata = group_strata(rows.group, rows.round_, rows.correct, 0, 0.5)
    picked = pick_groups(rows, strata, SampleRules(prompts=2, max_rows=100), np.random.default_rng(0))
    assert picked[0] == 0 and len(picked) == 3 and set(picked[1:]) <= {1, 2, 3, 4, 5}  # group 1 was not rescued
    draws = {tuple(pick_groups(rows, strata, SampleRules(prompts=2, max_rows=100), np.random.default_rng(s))[1:])
             for s in range(20)}
    assert len(draws) > 3  # the others are drawn at random
    # the row cap takes whole groups only: group 0's 6 rows, then only 4-row groups fit in 10
    capped = pick_groups(rows, strata, SampleRules(prompts=5, max_rows=10), np.random.default_rng(0))
    assert capped[0] == 0 and 1 not in capped and sum(int((rows.group == g).sum()) for g in capped) == 10
    assert pick_groups(rows, strata, SampleRules(prompts=0), np.random.default_rng(0)) == []


def test_detail_records_every_field_and_stage():
    rows = aero_like_step()
    cfg = parse_run_config({"method": "aero", "max_new_tokens": 16})
    train = np.array([24, 25, 8, 9, 10, 11])  # group 0's rescue pair; group 2 whole
    adv = np.array([-1.0, 1.0, 1.5, -0.5, -0.5, -0.5])
    d = step_detail(rows, train, adv, cfg=cfg, rules=SampleRules(prompts=1, max_rows=64, text_chars=100), seed_key=3)
    by_row = {r["row"]: r for r in d["rollouts"]}
    assert by_row[25]["stage"] == "rescue 1" and by_row[25]["advantage"] == 1.0 and by_row[25]["correct"]
    assert by_row[0]["stage"] == "curated out" and by_row[0]["advantage"] is None  # explored, not trained
    assert by_row[0]["stratum"] == "rescue" and by_row[0]["prompt"] == "prompt of row 0"
    assert set(by_row[0]) == {"group", "row", "prompt", "response", "reward", "correct", "advantage", "stratum", "round",
                              "version", "stage", "length", "truncated", "clipped"}
    assert {r["version"] for r in d["rollouts"]} == {2}
    json.dumps(d)  # plain data
    # reproducible: the same step draws the same random prompts; another step may not
    again = step_detail(rows, train, adv, cfg=cfg, rules=SampleRules(prompts=1, max_rows=64, text_chars=100), seed_key=3)
    assert again == d
    assert stage_of(2, True, 1) == "round 2" and stage_of(0, True, 2) == "explore"


def test_histograms_have_fixed_bins():
    rows = aero_like_step()
    h = step_histograms(rows, max_new_tokens=16)
    # pass rate per group over all its rows: 1/6, 0/6, 1/4, 2/4, 3/4, 4/4
    assert h["pass_rate"]["counts"] == fixed_histogram(np.array([1 / 6, 0, 0.25, 0.5, 0.75, 1.0]), 0, 1, PASS_BINS)
    assert h["pass_rate"]["counts"] == [1, 1, 1, 0, 0, 1, 0, 1, 0, 1] and len(h["length"]["counts"]) == LENGTH_BINS
    assert sum(h["length"]["counts"]) == len(rows.group) and h["length"]["hi"] == 16.0
    assert fixed_histogram(np.array([0.0, 1.0, 5.0, -1.0]), 0, 1, 2) == [2, 2]  # the last bin closed; outside clamps


def test_hostile_text_is_clipped_and_made_storable():
    text, clipped = clip_text("<script>alert(1)</script>\x00" + "\ud800" + "x" * 50, 30)
    assert clipped and len(text) == 30 and "\x00" not in text
    text.encode("utf-8")  # no lone surrogate left
    assert clip_text("short", 30) == ("short", False)


def test_operator_caps_come_from_the_policy():
    rules = SampleRules.from_policy(RunPolicy.from_env({"AERO_ROLLOUT_SAMPLE_PROMPTS": "2",
                                                        "AERO_ROLLOUT_SAMPLE_MAX_ROWS": "40",
                                                        "AERO_ROLLOUT_TEXT_CHARS": "64"}))
    assert rules == SampleRules(prompts=2, max_rows=40, text_chars=64)
    assert SampleRules.from_policy(RunPolicy()) == SampleRules()


@pytest.mark.parametrize("method", ["aero", "dapo"])
def test_the_embedded_loop_logs_each_steps_detail(method, tmp_path):
    cfg = parse_run_config({"preset": "tiny", "method": method, "steps": 2, "batch_prompts": 4, "eval_every": 0,
                            "eval_problems": 4, "eval_n": 2, "checkpoint_every": 0})
    mem = MemorySink()
    policy = RunPolicy(rollout_sample_prompts=1, rollout_sample_max_rows=200, rollout_text_chars=40)
    run_training(cfg, tmp_path, MultiSink(mem, JsonlSink(tmp_path / "log")), policy=policy)
    assert sorted(mem.details) == [1, 2]
    for step, d in mem.details.items():
        rollouts = d["rollouts"]
        groups = {r["group"] for r in rollouts}
        rescued = {r["group"] for r in rollouts if r["stage"].startswith("rescue") and r["correct"]}
        assert len(groups - rescued) <= 1 and rollouts  # one random prompt, plus the rescued groups
        assert all(len(r["prompt"]) <= 40 and len(r["response"]) <= 40 for r in rollouts)
        kept = [r for r in rollouts if r["stage"] != "curated out"]
        assert all(r["advantage"] is not None for r in kept)
        # the histograms count every prompt group and every generated rollout of the step
        m = mem.steps[step]
        assert sum(d["histograms"]["length"]["counts"]) == m["rollout/generated"]
        assert sum(d["histograms"]["pass_rate"]["counts"]) == m["prompts/used"]
        assert m["system/rss_mb"] > 10 and "system/cpu_percent" in m
        assert not any(k.startswith("system/gpu") for k in m)  # no GPU here: the keys are omitted
    lines = [json.loads(x) for x in (tmp_path / "log" / "details.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2] and lines[1]["detail"] == mem.details[2]
