"""verl's real trainer on the installed real model (smollm2-135m: 134.5M parameters, its own
tokenizer and chat template) on the CPU: GRPO (verl's stock fit) and AERO (the curated loop), two
steps each. The arithmetic problems are asked in words through the chat template, as on the
embedded engine, and verl's reward loop scores the free-text answers with the task's free-text
verifier. Small batches: the point is that every verl path runs on a real model, not what it
learns (BENCHMARKS.md measures that on the embedded engine)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

pytest.importorskip("verl")

from trainer.spec.config import for_method, parse_run_config  # noqa: E402
from trainer.platform.sinks import MemorySink  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

REAL = {"engine": "verl", "device": "cpu", "preset": "smollm2-135m", "steps": 2, "batch_prompts": 2, "n_total": 4,
        "max_new_tokens": 8, "eval_every": 0, "eval_problems": 2, "eval_n": 2, "checkpoint_every": 0, "seed": 3,
        "optim": {"lr": 1e-4, "warmup_steps": 0}, "aero": {"n_explore": 2, "n_max": 6}}


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    yield
    import ray

    ray.shutdown()


@pytest.mark.parametrize("method", ["grpo", "aero"])
def test_verl_trains_the_real_model_on_questions_in_words(method, smollm2, tmp_path):
    from trainer.embedded.presets import build_generated_task
    from trainer.tasks.arithmetic import score_problem_text
    from trainer.verl.runner import run_verl

    cfg = parse_run_config(for_method({**REAL, "method": method}, method))
    sink = MemorySink()
    try:
        summary = run_verl(cfg, tmp_path / method, sink)
        assert summary["status"] == "completed" and sorted(sink.steps) == [1, 2]
        for m in sink.steps.values():
            assert 0 < m["rollout/generated"] <= cfg.batch_prompts * cfg.n_total and m["tokens/generated"] > 0
            assert m["flops/total"] == pytest.approx(m["flops/rollout"] + m["flops/train"])
            if m["rollout/trained"]:
                assert m["train/grad_norm"] > 0
            if method == "aero":  # the curated loop: exploration, then its rescue calls
                assert m["rollout/gen_calls"] == 1 + m["rescue/calls"]
        assert "overall" in summary["final_eval"]
        # the embedded engine's task for the same config: its problems, rendered by its chat format
        task = build_generated_task(cfg, smollm2)
        hf = task.chat.hf
        stream = task.train_problems(0, cfg.steps * cfg.batch_prompts, cfg.seed)
        by_prompt = {hf.decode(task.encode_prompt(p), skip_special_tokens=True): p for p in stream}
        if os.environ.get("AERO_TEST_SHOW"):
            print(json.dumps({s: {k: v for k, v in m.items() if k.startswith(("rollout/", "rescue/", "reward"))}
                              for s, m in sink.steps.items()}, indent=1), sink.details[1]["rollouts"][:2])
        for step, d in sink.details.items():
            rows = d["rollouts"]
            assert rows
            # verl's agent loop rendered exactly the embedded prompt, and step s asks step s's problems
            asked = {by_prompt[r["prompt"]].prompt for r in rows}
            assert asked <= {p.prompt for p in stream[(step - 1) * cfg.batch_prompts:step * cfg.batch_prompts]}
            assert all("What is" in r["prompt"] for r in rows)
            # the reward is the free-text verifier's on the decoded answer (not the char preset's exact match)
            for r in rows:
                assert r["reward"] == score_problem_text(r["response"], by_prompt[r["prompt"]]), r
    finally:  # a 135M checkpoint with its optimizer is ~1.6 GB
        shutil.rmtree(tmp_path / method, ignore_errors=True)
