"""verl's real trainer on the CPU: RayPPOTrainer with a local Ray, the real actor/rollout/ref
worker (FSDP2 on gloo), verl's agent-loop and reward-loop managers with our reward, our HF
rollout server with real weight sync (trainer/verl/plugins), checkpoints and resume. Nothing is
a stand-in here; runs are tiny (the tiny preset, 8 prompts) and share one Ray session.

The rollout server starts from random weights (verl's ``load_format=dummy``): a held-out
accuracy far above a random policy's (which is 0 on exact-match arithmetic) shows that the
trainer's weight sync reached it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("verl")

from trainer.spec.config import for_method, parse_run_config  # noqa: E402
from trainer.platform.sinks import MemorySink  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TINY = {"engine": "verl", "device": "cpu", "steps": 2, "batch_prompts": 8, "n_total": 8, "eval_every": 0,
        "eval_problems": 8, "eval_n": 4, "checkpoint_every": 1, "aero": {"n_explore": 4}, "seed": 3}
TIMES: dict[str, float] = {}


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    yield
    import ray

    ray.shutdown()
    print("\n[verl on CPU] wall seconds per run: " + ", ".join(f"{k} {v:.0f}" for k, v in TIMES.items()))


def train(name: str, out: Path, should_stop=None, **kw):
    from trainer.verl.runner import run_verl

    cfg = parse_run_config(for_method({**TINY, **kw}, kw.get("method", "aero")))
    sink = MemorySink()
    t0 = time.monotonic()
    summary = run_verl(cfg, out, sink, should_stop=should_stop)
    TIMES[name] = time.monotonic() - t0
    return cfg, sink, summary


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """GRPO (verl's stock fit) and DAPO (the curated loop), 2 real steps each."""
    return {m: train(m, tmp_path_factory.mktemp(m), method=m) for m in ("grpo", "dapo")}


def assert_trained(cfg, sink, summary):
    assert summary["status"] == "completed" and summary["last_step"] == cfg.steps
    assert sorted(sink.steps) == list(range(1, cfg.steps + 1))
    for m in sink.steps.values():
        assert m["rollout/generated"] > 0 and m["tokens/generated"] > 0 and m["flops/rollout"] > 0
        assert m["flops/total"] == pytest.approx(m["flops/rollout"] + m["flops/train"])
        assert m["time/step_s"] >= m["time/rollout_s"] > 0
        if m["rollout/trained"]:
            assert m["train/grad_norm"] > 0 and "loss/policy" in m
    overall = summary["final_eval"]["overall"]
    # the tiny base scores ~0.3 here; a random policy (a server that never got the weights) 0
    assert overall["avg_at_k"] > 0.1, summary["final_eval"]
    assert [s for s, _ in sink.checkpoints] == list(range(1, cfg.steps + 1))  # announced after their steps
    assert all(p.name == f"global_step_{s}" and p.is_dir() for s, p in sink.checkpoints)
    # each step's rollout sample and histograms, relayed from the trainer actor, and its system metrics
    assert sorted(sink.details) == list(range(1, cfg.steps + 1))
    for step, d in sink.details.items():
        assert d["rollouts"] and all(r["prompt"] and r["stage"] for r in d["rollouts"])
        assert sum(d["histograms"]["length"]["counts"]) == sink.steps[step]["rollout/generated"]
        assert sink.steps[step]["system/rss_mb"] > 0


def test_grpo_runs_verls_stock_fit(runs):
    cfg, sink, summary = runs["grpo"]
    assert_trained(cfg, sink, summary)
    for m in sink.steps.values():  # every rollout trained: P x n_total
        assert m["rollout/generated"] == m["rollout/trained"] == cfg.batch_prompts * cfg.n_total


def test_dapo_runs_the_curated_loop(runs):
    cfg, sink, summary = runs["dapo"]
    assert_trained(cfg, sink, summary)
    for m in sink.steps.values():  # one prompt batch (max_gen_rounds 1), zero-variance groups dropped
        assert m["rollout/generated"] == cfg.batch_prompts * cfg.n_total and m["dapo/gen_rounds"] == 1
        assert m["rollout/trained"] == m["dapo/kept_groups"] * cfg.n_total


def test_aero_stops_with_a_checkpoint_and_resumes(tmp_path):
    """AERO on the curated loop: asked to stop after step 1, it checkpoints and returns
    'stopped'; run again on the same directory (through `aero train --engine verl`), it resumes
    from verl's checkpoint with the curation RNG it saved, and logs steps 2.. once."""
    out = tmp_path / "aero"
    seen = {"calls": 0}

    def stop_after_first_step():
        seen["calls"] += 1
        return (out / "verl" / "metrics.jsonl").is_file()

    cfg, first, summary = train("aero stop", out, should_stop=stop_after_first_step, method="aero", steps=4)
    assert summary["status"] == "stopped" and summary["final_eval"] is None
    stopped_at = summary["last_step"]
    assert stopped_at in (1, 2, 3) and sorted(first.steps) == list(range(1, stopped_at + 1))
    ckpt = out / "verl_checkpoints" / f"global_step_{stopped_at}"
    assert "curation_rng" in json.loads((ckpt / "curation_state.json").read_text())
    m = first.steps[1]
    assert m["rollout/generated"] <= cfg.batch_prompts * cfg.n_total  # the shared budget
    assert m["rollout/trained"] < m["rollout/generated"] and m["rollout/gen_calls"] == 1 + m["rescue/calls"]

    t0 = time.monotonic()
    cli = Path(sys.executable).with_name("aero")
    done = subprocess.run([str(cli), "train", "--engine", "verl", "--method", "aero", "--steps", "4", "--seed", "3",
                           "--out", str(out), "--set", "device=cpu", "--set", "batch_prompts=8", "--set", "n_total=8",
                           "--set", "aero.n_explore=4", "--set", "eval_every=0", "--set", "eval_problems=8",
                           "--set", "eval_n=4", "--set", "checkpoint_every=1"],
                          capture_output=True, text=True, timeout=600)
    TIMES["aero resume (CLI)"] = time.monotonic() - t0
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "completed at step 4" in done.stderr, done.stderr[-3000:]  # the CLI reports on stderr (rich)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # each step once: resumed, not restarted or doubled
    assert rows[0]["rollout/generated"] == m["rollout/generated"]  # step 1 kept from the first leg
    assert (out / "verl_checkpoints" / "global_step_4").is_dir()
    # keep_checkpoints (default 2): older step folders are deleted whole, across the two legs
    kept = sorted(p.name for p in (out / "verl_checkpoints").glob("global_step_*"))
    assert kept == ["global_step_3", "global_step_4"], kept


def test_aero_mem_keeps_its_prompt_memory_across_steps_and_checkpoints(tmp_path):
    """A method with per-prompt state on verl's real trainer: the prompt ids come from the rows'
    ``extra_info.where`` (a finite training set of 12, so step 2 revisits prompts of step 1) and
    the memory is saved beside each checkpoint and grows with the prompts seen."""
    cfg, sink, summary = train("aero-mem", tmp_path / "mem", method="aero-mem", train_size=12)
    assert_trained(cfg, sink, summary)
    saved = [json.loads((p / "curation_state.json").read_text())["method_state"] for _, p in sink.checkpoints]
    records = [len(s["aero_mem"]["memory"]["records"]) for s in saved]
    assert records[0] == cfg.batch_prompts and records[-1] == 12, records  # 8 prompts seen, then all 12
    assert [s["aero_mem"]["clock"] for s in saved] == [1, 2]
    assert sink.steps[1]["memory/known"] == 0 and sink.steps[2]["memory/known"] > 0  # step 2 revisits step 1's


def test_a_run_killed_between_a_steps_checkpoint_and_its_log_trains_that_step_again(tmp_path):
    """verl's loop saves a step's checkpoint, then validates, then logs the step. A run killed in
    that window (its process group, Ray and all, as a lost node or a dead worker leaves it) must
    not resume after a step no one stored: the checkpoint counts only once its step is logged, so
    the resume loads the step before, trains the step again, and every step is logged once."""
    import os
    import signal

    out = tmp_path / "grpo"
    args = [str(Path(sys.executable).with_name("aero")), "train", "--engine", "verl", "--method", "grpo",
            "--steps", "3", "--seed", "3", "--out", str(out), "--set", "device=cpu", "--set", "batch_prompts=8",
            "--set", "n_total=8", "--set", "eval_every=2", "--set", "eval_problems=16", "--set", "eval_n=8",
            "--set", "checkpoint_every=1"]
    saved, logged = out / "verl_checkpoints" / "global_step_2" / "curation_state.json", out / "verl" / "metrics.jsonl"
    marker = out / "verl_checkpoints" / "latest_checkpointed_iteration.txt"

    def logged_steps() -> list[int]:
        return [json.loads(line)["step"] for line in logged.read_text().splitlines()] if logged.is_file() else []

    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    # step 2's validation (16 problems x 7 benchmarks x 8 samples, far longer than the 20 ms poll)
    # runs after its checkpoint is saved and before it is logged: the window to kill in. It was 64
    # problems, but each run validates up to three times, and only this window needs it long.
    try:
        deadline = time.monotonic() + 600
        while not saved.is_file() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        in_window = saved.is_file() and 2 not in logged_steps()
        pointed = marker.read_text().strip() if marker.is_file() else None
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    assert in_window, f"step 2 was logged before its checkpoint's state file was seen: {logged_steps()}"
    assert pointed == "1", pointed  # step 2's checkpoint is on disk, but a resume loads step 1's
    assert logged_steps() == [1]

    t0 = time.monotonic()
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    TIMES["grpo killed mid-log, resumed (CLI)"] = time.monotonic() - t0
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "global_step_1" in done.stdout + done.stderr  # verl's "Resuming from" names the folder it loads
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and logged_steps() == [1, 2, 3]  # step 2 trained again, once
    assert marker.read_text().strip() == "3"
