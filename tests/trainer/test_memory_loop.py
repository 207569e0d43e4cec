"""aero-mem end to end on the shipped tiny preset with a finite training set: it trains, its
prompt memory is in the checkpoint, and a resumed run reproduces the metrics of an
uninterrupted one (timings aside)."""

import json

from trainer.embedded.checkpoint import load_latest_checkpoint
from trainer.spec.config import parse_run_config
from trainer.core.memory import from_dict
from trainer.platform.run import run_training
from trainer.platform.sinks import JsonlSink

# 8 problems, 4 per step: an epoch every 2 steps. Loose thresholds so (a), (b), (c), (d) all fire.
CFG = {"preset": "tiny", "method": "aero-mem", "steps": 6, "batch_prompts": 4, "train_size": 8, "eval_every": 0,
       "eval_problems": 4, "eval_n": 2, "checkpoint_every": 3, "optim": {"lr": 1e-3},
       "aero_mem": {"gamma": 0.9, "solved_tau": 0.5, "solved_conf": 0.5, "hard_mean": 0.3, "skip": True,
                    "skip_tau": 0.5, "skip_conf": 0.5, "revisit": 0.5, "give_up": True, "hope_tau": 0.5,
                    "hope_conf": 0.5, "hope_visits": 1, "hope_revisit": 0.3}}
TIMING = ("time/", "system/", "savings/s1_s", "savings/s2_s", "savings/s3_s")  # measured, not reproduced


def _metrics(d):
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: {k: v for k, v in r.items() if not k.startswith(TIMING)} for r in rows}


def test_aero_mem_trains_checkpoints_its_memory_and_resumes_exactly(tmp_path):
    cfg = parse_run_config(CFG)
    run_training(cfg, tmp_path / "a", JsonlSink(tmp_path / "a"))
    calls = {"n": 0}

    def stop_after_four():
        calls["n"] += 1
        return calls["n"] > 4  # steps 1-4 run (a checkpoint at 3, and one where the stop ends it)

    first = run_training(cfg, tmp_path / "b", JsonlSink(tmp_path / "b"), should_stop=stop_after_four)
    assert first["status"] == "stopped" and first["last_step"] == 4
    state = load_latest_checkpoint(tmp_path / "b")["method_state"]["aero_mem"]
    assert state["clock"] == 4 and len(from_dict(state["memory"]).records) == 8  # two epochs: all 8 seen
    second = run_training(cfg, tmp_path / "b", JsonlSink(tmp_path / "b"))
    assert second["status"] == "completed" and second["last_step"] == 6

    a, b = _metrics(tmp_path / "a"), _metrics(tmp_path / "b")
    assert sorted(b) == list(range(1, 7)) and a == b
    assert a[1]["memory/known"] == 0 and all(a[s]["memory/known"] == 4 for s in range(3, 7))
    later = [a[s] for s in range(3, 7)]
    assert sum(m["memory/explore_small"] + m["memory/skipped"] + m["memory/preallocated"] for m in later) > 0
    assert sum(m["memory/gave_up"] for m in later) > 0 and a[1]["memory/gave_up"] == 0
    for m in a.values():
        assert m["rollout/generated"] <= 16 * 4  # the equal budget n_total * P
    assert load_latest_checkpoint(tmp_path / "a")["method_state"] == load_latest_checkpoint(tmp_path / "b")["method_state"]
