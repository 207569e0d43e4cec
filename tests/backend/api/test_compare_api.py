"""GET /api/compare on seeded metric rows: means, totals, final evals, ratios against the
baseline, and the counterfactual vs measured waterfalls, all against hand-computed numbers."""

import pytest

from backend.db import runs as repo
from backend.db.metrics import upsert_eval_results, upsert_step_metrics
from backend.db.sweeps import create_sweep
from trainer.spec.config import RunConfig

GRPO_STEPS = {1: {"time/step_s": 2.0, "time/rollout_s": 1.0, "time/train_s": 1.0, "flops/total": 10.0, "flops/train": 6.0,
                  "tokens/trained": 100.0, "tokens/generated": 80.0, "rollout/trained": 64.0, "rollout/generated": 64.0,
                  "zero_acc/after_explore": 0.5},
              2: {"time/step_s": 4.0, "time/rollout_s": 3.0, "time/train_s": 1.0, "flops/total": 30.0, "flops/train": 6.0,
                  "tokens/trained": 100.0, "tokens/generated": 120.0, "rollout/trained": 64.0, "rollout/generated": 64.0,
                  "zero_acc/after_explore": 0.3}}
AERO_STEP = {"time/step_s": 1.0, "time/rollout_s": 0.5, "time/train_s": 0.5, "flops/total": 5.0, "flops/train": 2.0,
             "tokens/trained": 40.0, "tokens/generated": 90.0, "rollout/trained": 20.0, "rollout/generated": 60.0,
             "zero_acc/after_explore": 0.4, "zero_acc/after_rescue": 0.1,
             "savings/s1_tokens": 30.0, "savings/s2_tokens": 20.0, "savings/s3_tokens": 10.0,
             "savings/s1_flops": 2.0, "savings/s2_flops": 1.0, "savings/s3_flops": 1.0,
             "savings/s1_s": 0.25, "savings/s2_s": 0.15, "savings/s3_s": 0.1}


def _run(session, method, sweep_id, steps, seed=0):
    run = repo.create_run(session, RunConfig(method=method, seed=seed).model_dump(mode="json"), queue="cpu", sweep_id=sweep_id)
    upsert_step_metrics(session, run.id, steps)
    return run.id


@pytest.fixture
def seeded(session):
    sweep = create_sweep(session, "abl", {})
    g = _run(session, "grpo", sweep.id, GRPO_STEPS)
    a = _run(session, "aero", sweep.id, {s: AERO_STEP for s in range(1, 5)})
    upsert_eval_results(session, g, 2, {"arith": {"k": 4, "avg_at_k": 0.5, "pass_at_k": 0.8}})
    upsert_eval_results(session, a, 2, {"arith": {"k": 4, "avg_at_k": 0.6, "pass_at_k": 0.85}})
    upsert_eval_results(session, a, 4, {"arith": {"k": 4, "avg_at_k": 0.75, "pass_at_k": 0.9}})
    session.commit()
    return {"sweep": sweep.id, "grpo": g, "aero": a}


def test_stats_and_ratios(client, seeded):
    g, a = seeded["grpo"], seeded["aero"]
    out = client.get(f"/api/compare?run_ids={a},{g}").json()
    assert out["baseline"] == g  # first GRPO run by default
    ra, rg = out["runs"]
    assert (ra["run_id"], rg["run_id"], ra["steps"], rg["steps"]) == (a, g, 4, 2)
    assert rg["mean"]["time/step_s"] == 3.0 and rg["total"]["time/step_s"] == 6.0
    assert rg["mean"]["time/rollout_s"] == 2.0 and rg["mean"]["flops/total"] == 20.0 and rg["total"]["flops/total"] == 40.0
    assert rg["mean"]["zero_acc/after_explore"] == pytest.approx(0.4) and rg["mean"]["zero_acc/after_rescue"] is None
    assert rg["total"]["tokens/generated"] == 200.0 and rg["total"]["rollout/trained"] == 128.0
    assert ra["evals"]["arith"] == {"step": 4, "k": 4, "n": None, "avg_at_k": 0.75, "pass_at_k": 0.9}
    r = ra["ratios"]
    assert r["mean"]["time/step_s"] == pytest.approx(1 / 3) and r["total"]["time/step_s"] == pytest.approx(4 / 6)
    assert r["mean"]["tokens/trained"] == pytest.approx(0.4) and r["mean"]["flops/total"] == pytest.approx(0.25)
    assert r["mean"]["rollout/generated"] == pytest.approx(60 / 64) and r["steps"] == 2.0
    assert r["mean"]["zero_acc/after_rescue"] is None  # baseline lacks it
    assert r["evals"]["arith"] == {"avg_at_k": pytest.approx(1.5), "pass_at_k": pytest.approx(0.9 / 0.8)}
    assert rg["ratios"]["mean"]["time/step_s"] == 1.0
    # explicit baseline, added to the list if missing
    out = client.get(f"/api/compare?run_ids={g}&baseline={a}").json()
    assert out["baseline"] == a and [x["run_id"] for x in out["runs"]] == [g, a]
    assert out["runs"][0]["ratios"]["mean"]["time/step_s"] == 3.0


def test_counterfactual_then_measured_waterfall(client, session, seeded):
    g, a = seeded["grpo"], seeded["aero"]
    wf = client.get(f"/api/compare?run_ids={g},{a}").json()["waterfall"]
    (cf,) = wf["counterfactual"]
    assert cf["run_id"] == a and cf["source"] == "counterfactual"
    assert cf["per_step"]["tokens"] == {"baseline": 100.0, "s1": 30.0, "s2": 20.0, "s3": 10.0, "final": 40.0}
    assert cf["per_step"]["flops"] == {"baseline": 6.0, "s1": 2.0, "s2": 1.0, "s3": 1.0, "final": 2.0}
    assert cf["per_step"]["seconds"] == pytest.approx({"baseline": 1.0, "s1": 0.25, "s2": 0.15, "s3": 0.1, "final": 0.5})
    (ms,) = wf["measured"]
    assert ms["per_step"] is None and "missing aero-s1, aero-s1s2" in ms["label"]
    # complete the ablation ladder in the same sweep (and a second GRPO seed)
    sid = seeded["sweep"]
    _run(session, "aero-s1", sid, {1: {"tokens/trained": 70.0, "time/step_s": 2.5}})
    _run(session, "aero-s1s2", sid, {1: {"tokens/trained": 50.0, "time/step_s": 2.0}})
    _run(session, "grpo", sid, {1: {"tokens/trained": 120.0, "time/step_s": 4.0}}, seed=1)
    _run(session, "aero-s1", None, {1: {"tokens/trained": 1.0}})  # another sweep's run is ignored
    session.commit()
    (ms,) = client.get(f"/api/compare?run_ids={g},{a}").json()["waterfall"]["measured"]
    assert ms["source"] == "measured" and ms["sweep_id"] == sid and "measured: ablation runs of sweep" in ms["label"]
    assert ms["runs_per_method"] == {"grpo": 2, "aero-s1": 1, "aero-s1s2": 1, "aero": 1}
    # grpo over seeds: mean(100, 120) = 110
    assert ms["per_step"]["tokens"] == {"baseline": 110.0, "s1": 40.0, "s2": 20.0, "s3": 10.0, "final": 40.0}
    assert ms["per_step"]["step_seconds"] == pytest.approx({"baseline": 3.5, "s1": 1.0, "s2": 0.5, "s3": 1.0, "final": 1.0})


def test_bad_requests(client, seeded):
    assert client.get("/api/compare").status_code == 422
    assert client.get("/api/compare?run_ids=").status_code == 422
    assert client.get("/api/compare?run_ids=1,x").status_code == 422
    assert client.get(f"/api/compare?run_ids={seeded['grpo']}&baseline=99999").status_code == 404
