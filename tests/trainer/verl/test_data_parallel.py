"""Data-parallel size 2 on verl's real trainer on the CPU: ``resources.gpus_per_node=2`` places two
FSDP ranks (gloo processes on two logical Ray GPUs) and two rollout replicas, and trains what one
rank trains.

The comparison needs both runs to sample the same tokens: the shipped HF rollout server keys each
sample's draws by its request (verl's ``rollout.full_determinism``: ``det-<sample index>``, the
rollout seed and the step; trainer/verl/plugins/hf_rollout.py), so the tokens depend neither on
the order requests arrive in nor on which of the two replicas serves them. Everything is the
shipped path: verl's RayPPOTrainer, FSDP2 over gloo, our trainer and rollout server, checkpoints,
resume.

Per step, dp=2 equals dp=1 exactly in every count and accounting metric (rollouts and tokens
generated and trained, FLOPs, rewards, strata, AERO's rescue and savings counts); the losses,
gradient norms and entropies differ only by the order the ranks reduce in. Measured on the
2-core reference machine, seed 3, 3 steps, GRPO and AERO: loss |diff| <= 2.6e-8 (relative <= 8e-7;
GRPO's loss is ~1e-8, the mean of zero-mean advantages), grad norm <= 3.8e-6 (relative <= 1.2e-6),
entropy <= 1.2e-7, clip fraction and approx. KL equal; asserted within REL=1e-5 (+ ABS=1e-7).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("verl")

from trainer.spec.config import for_method, parse_run_config  # noqa: E402
from trainer.platform.sinks import MemorySink  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

TINY = {"engine": "verl", "device": "cpu", "steps": 3, "batch_prompts": 8, "n_total": 8, "eval_every": 0,
        "eval_problems": 8, "eval_n": 4, "checkpoint_every": 1, "keep_checkpoints": 3, "aero": {"n_explore": 4},
        "seed": 3}
REL, ABS = 1e-5, 1e-7
# float results of the update: equal up to the ranks' reduction order
CLOSE = ("loss/policy", "train/grad_norm", "train/entropy", "train/approx_kl", "train/clip_frac")
# wall-clock (time/*, savings/*_s, system/*) and verl's own names (its timings and throughput)
SKIP_PREFIXES = ("time/", "system/", "verl/")
# the masked rows that even the update out over the ranks, and the rollout servers' batched calls
# (one server per rank; how requests bunch into batches is timing): dp-dependent by design
DP_DEPENDENT = ("train/pad_rows", "rollout/engine_calls")
TIMES: dict[str, float] = {}
DIFFS: dict[str, float] = {}


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    print("\n[verl dp] wall seconds per run: " + ", ".join(f"{k} {v:.0f}" for k, v in TIMES.items()))
    print("[verl dp] max |dp2 - dp1|: " + ", ".join(f"{k} {v:.2g}" for k, v in DIFFS.items()))


def config(method: str, ranks: int):
    return parse_run_config(for_method({**TINY, "method": method, "resources": {"gpus_per_node": ranks}}, method))


def live_actors() -> dict[str, int]:
    """Live Ray actors by class (verl's FSDP workers are ``...<locals>.WorkerDict``: actor + rollout
    + ref, one per rank), from Ray's GCS (the state API needs Ray's dashboard, which these
    clusters run without)."""
    from ray._private import state

    names = [a["ActorClassName"].rsplit(".", 1)[-1] for a in state.actors().values() if a["State"] == "ALIVE"]
    return {n: names.count(n) for n in set(names)}


class Run:
    def __init__(self, name: str, out: Path, cfg, should_stop=None):
        from trainer.verl.runner import run_verl

        self.cfg, self.sink, self.workers = cfg, MemorySink(), {}

        def progress(step, total, metrics):
            import ray

            # at each step relayed while it trains (a resumed run's first calls re-forward old steps
            # before its workers exist; a call after the run finds Ray disconnected)
            if ray.is_initialized():
                now = live_actors()
                if now.get("WorkerDict", 0) >= self.workers.get("WorkerDict", 0):
                    self.workers = now

        t0 = time.monotonic()
        self.summary = run_verl(cfg, out, self.sink, should_stop=should_stop, progress=progress)
        TIMES[name] = time.monotonic() - t0


def compare(ref: dict[int, dict], got: dict[int, dict], steps) -> None:
    for s in steps:
        a, b = ref[s], got[s]
        assert set(a) == set(b), (s, set(a) ^ set(b))
        for k, va in a.items():
            vb = b[k]
            if k.startswith(SKIP_PREFIXES) or k.endswith("_s") or k in DP_DEPENDENT:
                continue
            if k in CLOSE:
                DIFFS[k] = max(DIFFS.get(k, 0.0), abs(va - vb))
                assert vb == pytest.approx(va, rel=REL, abs=ABS), (s, k, va, vb)
            else:
                assert vb == va, (s, k, va, vb)  # counts and accounting: exactly


def assert_trained(run, method: str) -> None:
    assert run.summary["status"] == "completed" and run.summary["last_step"] == 3
    assert sorted(run.sink.steps) == [1, 2, 3]
    for m in run.sink.steps.values():
        assert m["rollout/generated"] > 0 and m["tokens/generated"] > 0 and m["flops/total"] > 0
        if method == "grpo":
            assert m["rollout/generated"] == m["rollout/trained"] == 64


def assert_two_ranks(run, out: Path, steps) -> None:
    """Ray's view while the run trained: one WorkerDict actor (verl's actor + rollout + ref) per
    rank and one rollout replica per rank (the shipped HF server); verl's own
    record: each checkpoint it wrote holds one model/optimizer shard per rank of a world of 2."""
    assert run.workers.get("WorkerDict") == run.workers.get("HFRolloutServer") == 2, run.workers
    assert sorted(map(tuple, run.summary["placement"]["gpu_ids"])) == [("0", "1")]
    for step in steps:
        actor = out / "verl_checkpoints" / f"global_step_{step}" / "actor"
        names = sorted(p.name for p in actor.glob("*_world_size_*_rank_*.pt"))
        assert names == sorted(f"{kind}_world_size_2_rank_{r}.pt" for kind in ("model", "optim", "extra_state")
                               for r in (0, 1)), (out, step, names)


# Each test is self-contained: tests/conftest.py spreads slow tests between fast ones of other
# modules, which tears a module's fixtures down between its tests.


def test_grpo_two_ranks_train_what_one_rank_trains(tmp_path):
    ref = Run("grpo dp1", tmp_path / "dp1", config("grpo", 1))
    dp2 = Run("grpo dp2", tmp_path / "dp2", config("grpo", 2))
    assert_trained(ref, "grpo")
    assert_trained(dp2, "grpo")
    compare(ref.sink.steps, dp2.sink.steps, range(1, 4))
    assert ref.workers.get("WorkerDict") == ref.workers.get("HFRolloutServer") == 1, ref.workers
    assert_two_ranks(dp2, tmp_path / "dp2", range(1, 4))


def test_aero_two_ranks_train_what_one_rank_trains_across_a_resume(tmp_path):
    """dp=2 stopped after its first step (a checkpoint) and resumed on the same directory to 3
    steps: the resume path GRPO's stock fit shares, plus the curation state AERO saves beside
    each checkpoint."""
    ref = Run("aero dp1", tmp_path / "dp1", config("aero", 1))
    out = tmp_path / "dp2"
    stop = lambda: (out / "verl" / "metrics.jsonl").is_file()  # noqa: E731  (step 1 relayed)
    first = Run("aero dp2 to stop", out, config("aero", 2), should_stop=stop)
    resumed = Run("aero dp2 resumed", out, config("aero", 2))
    assert_trained(ref, "aero")
    # stopped after step 1 was relayed: at a step boundary, with a checkpoint, before the last step
    stopped_at = first.summary["last_step"]
    assert first.summary["status"] == "stopped" and stopped_at in (1, 2), first.summary
    assert sorted(first.sink.steps) == list(range(1, stopped_at + 1))
    assert (out / "verl_checkpoints" / f"global_step_{stopped_at}" / "curation_state.json").is_file()
    # the second call resumed from that checkpoint (the steps before it re-forwarded from the run
    # directory, unchanged) and trained the rest exactly as the uninterrupted dp=1 run did
    assert_trained(resumed, "aero")
    for s in first.sink.steps:
        assert resumed.sink.steps[s] == first.sink.steps[s]
    compare(ref.sink.steps, first.sink.steps, range(1, stopped_at + 1))
    compare(ref.sink.steps, resumed.sink.steps, range(1, 4))
    # the resumed call may train only the last step, which verl logs after its final validation,
    # just before the run ends (no step relayed while it trains): its world shows in its checkpoints
    assert_two_ranks(first, out, range(1, 4))
    assert sorted(map(tuple, resumed.summary["placement"]["gpu_ids"])) == [("0", "1")]


def test_aero_train_cli_with_two_ranks(tmp_path):
    """``aero train --engine verl --set resources.gpus_per_node=2``: two ranks, every rollout
    trained, each step once, shards of a world of 2."""
    out = tmp_path / "cli"
    env = {k: v for k, v in os.environ.items()
           if k not in ("AERO_VERL_OVERRIDES", "VERL_USE_EXTERNAL_MODULES", "PYTHONPATH")}
    cli = Path(sys.executable).with_name("aero")
    t0 = time.monotonic()
    done = subprocess.run([str(cli), "train", "--engine", "verl", "--method", "grpo", "--steps", "2", "--seed", "3",
                           "--out", str(out), "--set", "device=cpu", "--set", "batch_prompts=8", "--set", "n_total=8",
                           "--set", "eval_every=0", "--set", "eval_problems=8", "--set", "eval_n=4",
                           "--set", "checkpoint_every=0", "--set", "resources.gpus_per_node=2"],
                          capture_output=True, text=True, timeout=900, env=env)
    TIMES["grpo dp2 (CLI)"] = time.monotonic() - t0
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "completed at step 2" in done.stderr, done.stderr[-3000:]
    assert json.loads((out / "config.json").read_text())["resources"]["gpus_per_node"] == 2
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["rollout/generated"] == r["rollout/trained"] == 64 and r["tokens/generated"] > 0 for r in rows)
    actor = out / "verl_checkpoints" / "global_step_2" / "actor"
    assert sorted(p.name for p in actor.glob("model_world_size_*")) == [
        "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]
