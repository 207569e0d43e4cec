"""The ``reach`` blocks of GET /api/compare and /api/compare/groups, and eval keys of
/api/compare/curves, on seeded rows against hand-computed numbers.

Every run evaluates at steps 0, 10, ..., 60. GRPO's overall Avg@k is .30 .35 .40 .45 .50 .50 .50:
base .30, final (mean of the last 3) .50, gain .20, targets .40 / .45 / .48 / .50 at 50 / 75 / 90
/ 100% of the gain. Smoothed over 3 evals: .300 .325 .350 .400 .450 .483 .500, so GRPO first
reaches them at steps 30, 40, 50, 60. AERO's .30 .40 .50 .50 .50 .50 .50 smooths to .300 .350
.400 .467 .500 .500 .500: steps 20, 30, 40, 40. A flat run (.30 throughout) never reaches any.
"""

import math

import pytest

from backend.db import runs as repo
from backend.db.metrics import upsert_eval_results, upsert_step_metrics
from trainer.spec.config import RunConfig

GRPO = [0.30, 0.35, 0.40, 0.45, 0.50, 0.50, 0.50]
AERO = [0.30, 0.40, 0.50, 0.50, 0.50, 0.50, 0.50]
FLAT = [0.30] * 7
T975_1 = 12.706204736  # Student-t 0.975 quantile, 1 degree of freedom


def _run(session, method, seed, values, flops, step_s, *, steps=60, step0=True):
    """A run with ``steps`` steps of ``flops`` FLOPs, ``step_s`` training seconds and 64 x
    ``flops`` rollouts (10 tokens each) each, and an overall evaluation every 10 steps from
    step 0 (without step 0 when ``step0`` is False)."""
    cfg = RunConfig(method=method, seed=seed, eval_every=10).model_dump(mode="json")
    rid = repo.create_run(session, cfg, queue="cpu").id
    upsert_step_metrics(session, rid, {s: {"flops/total": flops, "time/step_s": step_s, "time/elapsed_s": step_s * s,
                                           "rollout/generated": 64 * flops, "tokens/generated": 640 * flops}
                                       for s in range(1, steps + 1)})
    for i, v in enumerate(values):
        if i or step0:
            upsert_eval_results(session, rid, 10 * i, {"overall": {"n": 8, "k": 8, "avg_at_k": v, "pass_at_k": min(1.0, v + 0.2)}})
    return rid


@pytest.fixture
def runs(session):
    ids = {"grpo": _run(session, "grpo", 0, GRPO, 2.0, 0.2), "aero": _run(session, "aero", 0, AERO, 1.0, 0.1),
           "flat": _run(session, "dapo", 0, FLAT, 1.0, 0.1)}
    session.commit()
    return ids


def test_compare_reach_per_run_by_hand(client, runs):
    g, a, f = runs["grpo"], runs["aero"], runs["flat"]
    reach = client.get(f"/api/compare?run_ids={a},{g},{f}").json()["reach"]
    assert reach["baseline_run_id"] == g and reach["reason"] is None
    assert (reach["metric"], reach["benchmark"], reach["window"]) == ("avg_at_k", "overall", 3)
    assert reach["base"] == 0.3 and reach["final"] == pytest.approx(0.5) and reach["gain"] == pytest.approx(0.2)
    assert [t["fraction"] for t in reach["targets"]] == [0.5, 0.75, 0.9, 1.0]
    assert [t["accuracy"] for t in reach["targets"]] == pytest.approx([0.40, 0.45, 0.48, 0.50])
    runs_ = {r["run_id"]: r for r in reach["runs"]}
    assert [r["run_id"] for r in reach["runs"]] == [a, g, f]  # the order of the request
    grpo, aero, flat = runs_[g]["targets"], runs_[a]["targets"], runs_[f]["targets"]
    assert [t["step"] for t in grpo] == [30, 40, 50, 60] and [t["flops"] for t in grpo] == [60.0, 80.0, 100.0, 120.0]
    assert [t["seconds"] for t in grpo] == pytest.approx([6.0, 8.0, 10.0, 12.0])  # time/elapsed_s at that step
    assert [t["step"] for t in aero] == [20, 30, 40, 40] and [t["flops"] for t in aero] == [20.0, 30.0, 40.0, 40.0]
    # ratio at equal accuracy: AERO's FLOPs / GRPO's at each target
    assert [t["ratio"]["flops"] for t in aero] == pytest.approx([20 / 60, 30 / 80, 40 / 100, 40 / 120])
    assert [t["ratio"]["seconds"] for t in aero] == pytest.approx([2 / 6, 3 / 8, 4 / 10, 4 / 12])
    # rollouts to target (Pilot-Commit's view): cumulative rollout/generated and tokens/generated there
    assert [t["rollouts"] for t in grpo] == [30 * 128, 40 * 128, 50 * 128, 60 * 128]
    assert [t["tokens"] for t in aero] == [20 * 640, 30 * 640, 40 * 640, 40 * 640]
    assert [t["ratio"]["rollouts"] for t in aero] == pytest.approx([20 / 60, 30 / 80, 40 / 100, 40 / 120])
    assert all(t["ratio"] == {"flops": 1.0, "seconds": 1.0, "rollouts": 1.0, "tokens": 1.0} for t in grpo)
    # not reached is a result, kept with nulls
    assert [t["reached"] for t in flat] == [False] * 4
    assert flat[0] == {"fraction": 0.5, "accuracy": pytest.approx(0.4), "reached": False, "step": None, "flops": None,
                       "seconds": None, "rollouts": None, "tokens": None,
                       "ratio": {"flops": None, "seconds": None, "rollouts": None, "tokens": None}}
    assert runs_[a]["base"] == 0.3 and runs_[a]["evals"] == 7


def test_compare_reach_without_a_step0_eval_says_why(client, session, runs):
    late = _run(session, "grpo", 1, GRPO, 2.0, 0.2, step0=False)
    session.commit()
    reach = client.get(f"/api/compare?run_ids={late},{runs['aero']}").json()["reach"]
    assert reach["baseline_run_id"] == late and reach["base"] is None and reach["targets"] == []
    assert reach["reason"] == "no step-0 evaluation of the base"
    assert all(r["targets"] == [] for r in reach["runs"]) and reach["runs"][0]["base"] is None
    # another baseline with a step-0 evaluation: the run without one is still measured against it
    reach = client.get(f"/api/compare?run_ids={late},{runs['grpo']}&baseline={runs['grpo']}").json()["reach"]
    assert reach["reason"] is None and [t["step"] for t in reach["runs"][0]["targets"]] == [30, 40, 50, 60]


def test_compare_reach_without_gain_says_why(client, session):
    worse = _run(session, "grpo", 0, [0.4, 0.3, 0.3, 0.3], 1.0, 0.1, steps=30)
    session.commit()
    reach = client.get(f"/api/compare?run_ids={worse}").json()["reach"]
    assert reach["targets"] == [] and reach["gain"] == pytest.approx(-0.1) and "did not improve" in reach["reason"]


@pytest.fixture
def seeded_groups(session):
    """GRPO x seeds 0, 1, 2 (the same curve, 2 FLOPs and 0.2 s per step); AERO x seeds 0, 1, 2:
    seeds 0 and 1 learn fast (1 and 1.5 FLOPs per step), seed 2 stays flat (80 steps stored, so
    a later evaluation has a cost); DAPO seed 7 has no GRPO partner."""
    ids = {"grpo": [_run(session, "grpo", s, GRPO, 2.0, 0.2) for s in (0, 1, 2)],
           "aero": [_run(session, "aero", 0, AERO, 1.0, 0.1), _run(session, "aero", 1, AERO, 1.5, 0.1),
                    _run(session, "aero", 2, FLAT, 1.0, 0.1, steps=80)],
           "dapo": [_run(session, "dapo", 7, AERO, 1.0, 0.1)]}
    session.commit()
    return ids


def _ids(*lists):
    return ",".join(str(i) for ids in lists for i in ids)


def test_group_reach_pairs_by_seed_by_hand(client, seeded_groups):
    g, a, d = seeded_groups["grpo"], seeded_groups["aero"], seeded_groups["dapo"]
    out = client.get(f"/api/compare/groups?run_ids={_ids(g, a, d)}").json()
    reach = out["reach"]
    assert reach["baseline"] == out["baseline"] == out["groups"][0]["key"] and reach["reason"] is None
    assert reach["base"]["mean"] == 0.3 and reach["gain"]["mean"] == pytest.approx(0.2) and reach["gain"]["n"] == 3
    assert [t["accuracy"]["mean"] for t in reach["targets"]] == pytest.approx([0.40, 0.45, 0.48, 0.50])
    grpo, aero, dapo = reach["groups"]
    assert (grpo["label"], aero["label"], dapo["label"]) == ("grpo", "aero", "dapo")
    assert [t["reached"] for t in grpo["targets"]] == [3, 3, 3, 3] and grpo["targets"][0]["flops"]["mean"] == 60.0
    assert grpo["targets"][0]["ratio"]["flops"]["mean"] == pytest.approx(1.0)
    # AERO at 50% of the gain: seeds 0 and 1 reach at step 20 (20 and 30 FLOPs), seed 2 never does
    half = aero["targets"][0]
    assert (aero["pairs"], aero["usable"], half["reached"], half["of"]) == (3, 3, 2, 3)
    assert half["step"]["values"] == [20.0, 20.0] and half["flops"]["values"] == [20.0, 30.0]
    h = T975_1 * math.sqrt(50.0) / math.sqrt(2)  # s = sqrt(((20-25)^2 + (30-25)^2) / 1)
    assert half["flops"]["mean"] == 25.0 and half["flops"]["hi"] == pytest.approx(25 + h)
    assert half["seconds"]["values"] == pytest.approx([2.0, 2.0])
    r = half["ratio"]["flops"]  # per seed pair: 20/60, 30/60, not reached; geometric mean of the two
    assert [p["ratio"] for p in r["pairs"]] == [pytest.approx(1 / 3), pytest.approx(0.5), None]
    assert [(p["seed"], p["run_id"], p["baseline_run_id"]) for p in r["pairs"]] == list(zip([0, 1, 2], a, g))
    assert r["mean"] == pytest.approx(math.sqrt(1 / 6)) and r["n"] == 2 and r["scale"] == "log"
    assert [s["reached"] for s in half["seeds"]] == [True, True, False] and half["seeds"][2]["flops"] is None
    assert [t["reached"] for t in aero["targets"]] == [2, 2, 2, 2]
    # DAPO seed 7 has no GRPO run of its seed: no pairs, said so
    assert dapo["pairs"] == 0 and dapo["targets"] == [] and dapo["unpaired_run_ids"] == d
    assert dapo["reason"] == "no run shares a seed with the baseline group"


def test_group_reach_skips_a_seed_without_step0_and_follows_new_evals(client, session, seeded_groups):
    g, a = seeded_groups["grpo"], seeded_groups["aero"]
    late = _run(session, "grpo", 3, GRPO, 2.0, 0.2, step0=False)
    aero3 = _run(session, "aero", 3, AERO, 1.0, 0.1)
    session.commit()
    url = f"/api/compare/groups?run_ids={_ids(g, [late], a, [aero3])}"
    first = client.get(url).json()["reach"]
    grpo, aero = first["groups"]
    assert (aero["pairs"], aero["usable"]) == (4, 3)
    assert aero["skipped"] == [{"seed": 3, "run_id": aero3, "baseline_run_id": late, "reason": "no step-0 evaluation of the base"}]
    assert first["base"]["n"] == 3 and (aero["targets"][0]["reached"], aero["targets"][0]["of"]) == (2, 3)
    assert client.get(url).json()["reach"] == first  # served from the cache
    # AERO seed 2 evaluates once more at step 70 (0.6): its smoothed accuracy (.3 + .3 + .6) / 3 = .4 reaches 50%
    upsert_eval_results(session, a[2], 70, {"overall": {"n": 8, "k": 8, "avg_at_k": 0.6, "pass_at_k": 0.8}})
    session.commit()
    half = client.get(url).json()["reach"]["groups"][1]["targets"][0]
    assert (half["reached"], half["of"]) == (3, 3) and half["flops"]["values"] == [20.0, 30.0, 70.0]
    assert half["ratio"]["flops"]["pairs"][2]["ratio"] == pytest.approx(70 / 60)


def test_group_reach_when_the_baseline_has_no_targets(client, session):
    late = [_run(session, "grpo", s, GRPO, 2.0, 0.2, step0=False) for s in (0, 1)]
    aero = [_run(session, "aero", s, AERO, 1.0, 0.1) for s in (0, 1)]
    session.commit()
    reach = client.get(f"/api/compare/groups?run_ids={_ids(late, aero)}").json()["reach"]
    assert reach["reason"] == "no step-0 evaluation of the base" and reach["targets"] == []
    assert reach["base"]["n"] == 0 and reach["groups"][1]["reason"] == "no step-0 evaluation of the base"
    assert reach["groups"][1]["usable"] == 0 and len(reach["groups"][1]["skipped"]) == 2


# ---------------------------------------------------------------- eval keys of /compare/curves


def test_eval_curve_on_step_flops_and_time(client, seeded_groups):
    g = seeded_groups["grpo"]
    base = f"/api/compare/curves?run_ids={_ids(g)}&keys=eval/overall/avg_at_k"
    band = client.get(base).json()["groups"][0]["curves"]["eval/overall/avg_at_k"]
    assert band["x"] == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0]  # the eval steps, not a grid of steps
    assert band["mean"] == pytest.approx(GRPO) and band["n"] == [3] * 7 and band["lo"] == pytest.approx(GRPO)
    out = client.get(base + "&x=flops&smooth=3").json()
    assert out["x"] == "flops" and out["smooth"] == 3
    band = out["groups"][0]["curves"]["eval/overall/avg_at_k"]
    assert band["x"] == [0.0, 20.0, 40.0, 60.0, 80.0, 100.0, 120.0]  # cumulative FLOPs at each eval step
    assert band["mean"] == pytest.approx([0.3, 0.325, 0.35, 0.4, 0.45, 0.5 - 0.05 / 3, 0.5])
    band = client.get(base + "&x=time").json()["groups"][0]["curves"]["eval/overall/avg_at_k"]
    assert band["x"] == pytest.approx([0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0])  # time/elapsed_s, evaluation excluded


def test_eval_curve_beside_step_keys_and_across_seeds_of_different_cost(client, seeded_groups):
    a = seeded_groups["aero"][:2]  # 1 and 1.5 FLOPs per step: eval x differ between the seeds
    out = client.get(f"/api/compare/curves?run_ids={_ids(a)}&keys=flops/total,eval/overall/pass_at_k&x=flops").json()
    curves = out["groups"][0]["curves"]
    assert set(curves) == {"flops/total", "eval/overall/pass_at_k"}
    band = curves["eval/overall/pass_at_k"]
    assert band["x"][:3] == [0.0, 10.0, 15.0] and band["x"][-1] == 90.0  # the union of both seeds' eval x
    assert band["n"][0] == 2 and band["n"][-1] == 1  # seed 0 ends at 60 FLOPs
    assert band["mean"][-1] == pytest.approx(0.7)


@pytest.mark.parametrize("key", ["eval/overall/avg", "eval/avg_at_k", "eval//pass_at_k"])
def test_malformed_eval_keys_are_refused(client, seeded_groups, key):
    r = client.get(f"/api/compare/curves?run_ids={seeded_groups['grpo'][0]}&keys={key}")
    assert r.status_code == 422
    (d,) = r.json()["detail"]
    assert d["loc"] == ["query", "keys"] and "eval/<benchmark>/<metric>" in d["msg"]


def test_openapi_documents_the_reach_blocks(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert "reach" in schemas["ComparePublic"]["properties"] and "reach" in schemas["GroupComparePublic"]["properties"]
    target = schemas["GroupReachTargetPublic"]["properties"]
    assert "description" in target["reached"] and "description" in target["ratio"]
    assert "description" in schemas["ReachResultPublic"]["properties"]["seconds"]
