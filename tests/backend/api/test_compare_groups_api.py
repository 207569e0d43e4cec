"""GET /api/compare/groups and /api/compare/curves on seeded rows: seed grouping, mean ± t CI,
per-seed-pair ratios, the paired test per benchmark and the bands, against hand-computed numbers."""

import math

import pytest

from backend.db import runs as repo
from backend.db.metrics import upsert_eval_results, upsert_step_metrics
from backend.db.sweeps import create_sweep
from backend.services.groups import STALENESS, Group, label_groups
from trainer.spec.config import RunConfig

T975_2 = 4.302652730  # Student-t 0.975 quantile, 2 degrees of freedom


def _run(session, method, seed, step_s, flops, *, sweep_id=None, lr=3e-5, per_problem=None, k=4, steps=3, name=None):
    cfg = RunConfig(method=method, seed=seed, optim={"lr": lr}, name=name).model_dump(mode="json")
    run = repo.create_run(session, cfg, queue="cpu", sweep_id=sweep_id)
    upsert_step_metrics(session, run.id, {s: {"time/step_s": step_s, "flops/total": flops, "reward/mean": 0.1 * s + seed,
                                              "time/elapsed_s": step_s * s} for s in range(1, steps + 1)})
    if per_problem is not None:
        upsert_eval_results(session, run.id, steps, {"overall": {"n": 4, "k": k, "per_problem": per_problem,
                                                                 "avg_at_k": sum(c for _, c in per_problem) / (4 * len(per_problem))}})
    return run.id


BASE_PP = [[4, 0], [4, 1], [4, 2], [4, 3]]
BETTER_PP = [[4, 1], [4, 2], [4, 3], [4, 4]]  # +1 correct on every problem: avg +0.25 each


@pytest.fixture
def seeded(session):
    sw = create_sweep(session, "seeds", {})
    ids = {
        "grpo": [_run(session, "grpo", s, t, 10.0, sweep_id=sw.id, per_problem=BASE_PP, name=f"g{s}") for s, t in ((0, 2.0), (1, 3.0), (2, 4.0))],
        "aero": [_run(session, "aero", s, t, 4.0, sweep_id=sw.id, per_problem=BETTER_PP) for s, t in ((0, 1.0), (1, 1.5), (2, 3.0))],
        "aero_lr": [_run(session, "aero", 0, 1.0, 4.0, lr=1e-5, per_problem=BASE_PP)],
    }
    session.commit()
    return ids


def _ids(*lists):
    return ",".join(str(i) for ids in lists for i in ids)


def test_groups_form_by_config_without_seed(client, seeded):
    out = client.get(f"/api/compare/groups?run_ids={_ids(seeded['aero'], seeded['grpo'], seeded['aero_lr'])}").json()
    groups = {tuple(g["run_ids"]): g for g in out["groups"]}
    assert set(groups) == {tuple(seeded["aero"]), tuple(seeded["grpo"]), tuple(seeded["aero_lr"])}
    g = groups[tuple(seeded["grpo"])]
    assert out["baseline"] == g["key"] and g["label"] == "grpo" and g["seeds"] == [0, 1, 2]  # names differ: still one group
    a, lr = groups[tuple(seeded["aero"])], groups[tuple(seeded["aero_lr"])]
    assert a["label"] == "aero · optim.lr=3e-05" and lr["label"] == "aero · optim.lr=1e-05"


def test_mean_ci_and_seed_pair_ratios_by_hand(client, seeded):
    out = client.get(f"/api/compare/groups?run_ids={_ids(seeded['grpo'], seeded['aero'])}").json()
    g, a = out["groups"]
    st = g["mean"]["time/step_s"]  # per-run means 2, 3, 4 -> mean 3, s = 1
    h = T975_2 / math.sqrt(3)
    assert st["mean"] == pytest.approx(3.0) and st["lo"] == pytest.approx(3 - h) and st["hi"] == pytest.approx(3 + h)
    assert st["values"] == [2.0, 3.0, 4.0] and st["n"] == 3
    assert g["total"]["time/step_s"]["mean"] == pytest.approx(9.0)  # 3 steps
    assert g["steps"]["mean"] == 3.0 and g["steps"]["lo"] == pytest.approx(3.0)
    r = a["ratios"]["mean"]["time/step_s"]  # pairs by seed: 1/2, 1.5/3, 3/4
    assert [p["ratio"] for p in r["pairs"]] == pytest.approx([0.5, 0.5, 0.75])
    assert [(p["seed"], p["run_id"], p["baseline_run_id"]) for p in r["pairs"]] == list(zip([0, 1, 2], seeded["aero"], seeded["grpo"]))
    logs = [math.log(0.5), math.log(0.5), math.log(0.75)]  # geometric mean, t interval on the log scale
    m = sum(logs) / 3
    s = math.sqrt(sum((v - m) ** 2 for v in logs) / 2)
    assert r["scale"] == "log" and r["mean"] == pytest.approx((0.5 * 0.5 * 0.75) ** (1 / 3))
    assert r["hi"] == pytest.approx(math.exp(m + T975_2 * s / math.sqrt(3)))
    assert a["ratios"]["mean"]["flops/total"]["mean"] == pytest.approx(0.4) and a["ratios"]["mean"]["flops/total"]["lo"] == pytest.approx(0.4)
    assert g["ratios"]["mean"]["time/step_s"]["mean"] == pytest.approx(1.0)  # the baseline against itself


def test_evals_and_significance_by_hand(client, seeded):
    out = client.get(f"/api/compare/groups?run_ids={_ids(seeded['grpo'], seeded['aero'])}").json()
    g, a = out["groups"]
    assert out["k"] == 4
    assert g["evals"]["overall"]["avg_at_k"]["mean"] == pytest.approx(0.375) and a["evals"]["overall"]["avg_at_k"]["mean"] == pytest.approx(0.625)
    # pass@4 with n=4: 1 if c > 0 -> grpo 3/4, aero 1
    assert g["evals"]["overall"]["pass_at_k"]["mean"] == pytest.approx(0.75) and a["evals"]["overall"]["pass_at_k"]["mean"] == 1.0
    assert a["ratios"]["evals"]["overall"]["avg_at_k"]["mean"] == pytest.approx(0.625 / 0.375)
    rows = {r["metric"]: r for r in out["significance"]["overall"]}
    avg = rows["avg_at_k"]
    assert avg["group"] == a["key"] and avg["baseline"] == g["key"] and avg["problems"] == 4 and avg["seeds"] == [3, 3]
    # every problem's difference is +0.25: of the 2^4 sign flips only all-+ and all-- reach |0.25| -> p = 2/16
    assert avg["diff"] == pytest.approx(0.25) and avg["p_value"] == pytest.approx(0.125)
    assert avg["ci"] == pytest.approx([0.25, 0.25])
    # pass@4 differs only on problem 1 (0 -> 1): p = 1 (a single non-zero difference flips to -0.25 half the time,
    # and |mean| is 0.25 either way)
    assert rows["pass_at_k"]["diff"] == pytest.approx(0.25) and rows["pass_at_k"]["p_value"] == pytest.approx(1.0)


def test_identical_groups_give_p_one_and_k_is_the_common_one(client, session, seeded):
    twin = [_run(session, "dapo", s, 2.0, 10.0, per_problem=BASE_PP, k=2) for s in (0, 1, 2)]
    session.commit()
    out = client.get(f"/api/compare/groups?run_ids={_ids(seeded['grpo'], twin)}").json()
    assert out["k"] == 2
    (row_avg, row_pass) = out["significance"]["overall"]
    assert row_avg["p_value"] == 1.0 and row_avg["diff"] == 0.0 and row_pass["k"] == 2


def test_explicit_groups_and_baseline(client, seeded):
    g, a = seeded["grpo"], seeded["aero"]
    out = client.get(f"/api/compare/groups?groups={_ids(g[:2])}&groups={_ids(a[:2])}&baseline={a[0]}").json()
    assert [x["run_ids"] for x in out["groups"]] == [g[:2], a[:2]]
    assert out["baseline"] == out["groups"][1]["key"]
    assert out["groups"][0]["ratios"]["mean"]["time/step_s"]["mean"] == pytest.approx(2.0)  # 2/1 and 3/1.5
    # explicit groups plus loose run ids: the loose ones are grouped automatically
    out = client.get(f"/api/compare/groups?groups={_ids(g)}&run_ids={_ids(a)}").json()
    assert [x["run_ids"] for x in out["groups"]] == [g, a]
    # a loose run with an explicit group's config is kept, as a group of its own
    out = client.get(f"/api/compare/groups?groups={_ids(g[:2])}&run_ids={g[2]}&baseline={g[2]}").json()
    assert [x["run_ids"] for x in out["groups"]] == [g[:2], [g[2]]]
    assert [x["label"] for x in out["groups"]] == ["grpo", "grpo (2)"] and out["baseline"] == out["groups"][1]["key"]


def test_groups_of_asynchronous_runs_are_labelled_by_their_staleness(client, session):
    """Runs that differ in offpolicy.max_staleness form a group per k; an asynchronous group
    reads "k=2" even beside another method's groups, a synchronous one reads as before, and the
    other differing fields follow."""
    def add(method, seed, k, lr=3e-5):
        cfg = RunConfig(method=method, seed=seed, optim={"lr": lr}, offpolicy={"max_staleness": k}).model_dump(mode="json")
        run = repo.create_run(session, cfg, queue="cpu")
        upsert_step_metrics(session, run.id, {1: {"time/step_s": 1.0, "flops/total": 1.0}})
        return run.id

    ids = [add("aero", 0, 0), add("aero", 1, 0), add("aero", 0, 2), add("aero", 1, 2), add("grpo", 0, 1), add("grpo", 1, 1),
           add("aero", 0, 2, lr=1e-5), add("grpo", 0, 0)]
    session.commit()
    out = client.get(f"/api/compare/groups?run_ids={_ids(ids)}").json()
    assert [(g["label"], g["run_ids"]) for g in out["groups"]] == [
        ("aero · optim.lr=3e-05", ids[:2]), ("aero · k=2, optim.lr=3e-05", ids[2:4]), ("grpo · k=1", ids[4:6]),
        ("aero · k=2, optim.lr=1e-05", ids[6:7]), ("grpo", ids[7:])]
    # a config stored before the field existed has no staleness: synchronous, no k in its label
    old, new = Group("a", "aero", [], config={"steps": 3}), Group("b", "aero", [], config={"steps": 3, STALENESS: 1})
    label_groups([old, new])
    assert (old.label, new.label) == ("aero", "aero · k=1")


@pytest.mark.parametrize("query, field, words", [
    ("", "run_ids", "give run_ids"),
    ("groups=1,x", "groups", "should match pattern"),
    ("run_ids=1&baseline=0", "baseline", "greater than or equal"),
    ("run_ids=1&alpha=0.7", "alpha", "less than"),
])
def test_bad_queries_name_the_field(client, seeded, query, field, words):
    r = client.get(f"/api/compare/groups?{query}")
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert any(d["loc"][1] == field and words in d["msg"] for d in detail), detail


def test_mixed_explicit_group_is_refused_with_the_differing_fields(client, seeded):
    r = client.get(f"/api/compare/groups?groups={seeded['grpo'][0]},{seeded['aero'][0]}")
    assert r.status_code == 422
    (d,) = r.json()["detail"]
    assert d["loc"] == ["query", "groups"] and "method" in d["msg"] and "differ in more than the seed" in d["msg"]
    r = client.get(f"/api/compare/groups?groups={seeded['grpo'][0]}&groups={seeded['grpo'][0]},{seeded['grpo'][1]}")
    assert r.status_code == 422 and "only one group" in r.json()["detail"][0]["msg"]


def test_unknown_run_and_foreign_baseline(client, seeded):
    assert client.get("/api/compare/groups?run_ids=999999").status_code == 404
    r = client.get(f"/api/compare/groups?run_ids={seeded['grpo'][0]}&baseline={seeded['aero'][0]}")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "baseline"]


def test_curves_band_by_hand(client, seeded):
    g = seeded["grpo"]
    out = client.get(f"/api/compare/curves?run_ids={_ids(g)}&keys=reward/mean").json()
    assert out["x"] == "step"
    (grp,) = out["groups"]
    band = grp["curves"]["reward/mean"]
    # reward = 0.1 * step + seed, seeds 0, 1, 2: mean 0.1 * step + 1, s = 1
    assert band["x"] == [1.0, 2.0, 3.0] and band["n"] == [3, 3, 3]
    assert band["mean"] == pytest.approx([1.1, 1.2, 1.3])
    assert band["hi"] == pytest.approx([1.1 + T975_2 / math.sqrt(3), 1.2 + T975_2 / math.sqrt(3), 1.3 + T975_2 / math.sqrt(3)])


def test_curves_on_flops_and_time(client, seeded):
    g = seeded["grpo"]
    out = client.get(f"/api/compare/curves?run_ids={_ids(g)}&keys=reward/mean&x=flops&points=10").json()
    band = out["groups"][0]["curves"]["reward/mean"]
    assert band["x"][0] == 10.0 and band["x"][-1] == 30.0 and len(band["x"]) == 10  # cumulative flops 10, 20, 30
    assert band["mean"][-1] == pytest.approx(1.3)
    out = client.get(f"/api/compare/curves?run_ids={_ids(g)}&keys=reward/mean&x=time&points=10").json()
    band = out["groups"][0]["curves"]["reward/mean"]
    # elapsed = step_s * step: run s0 ends at 6 s, s2 at 12 s -> the last point (12 s) has one seed
    assert band["x"][-1] == 12.0 and band["n"][-1] == 1 and band["lo"][-1] is None
    assert band["mean"][-1] == pytest.approx(2.3)


def test_curves_reject_bad_keys(client, seeded):
    r = client.get(f"/api/compare/curves?run_ids={seeded['grpo'][0]}&keys=" + ",".join(f"k{i}" for i in range(9)))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "keys"]
    r = client.get(f"/api/compare/curves?run_ids={seeded['grpo'][0]}&keys=reward/mean&x=tokens")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "x"


def test_cached_answers_follow_new_steps_and_evals(client, session, seeded):
    ids = _ids(seeded["grpo"], seeded["aero"])
    first = client.get(f"/api/compare/groups?run_ids={ids}").json()
    assert client.get(f"/api/compare/groups?run_ids={ids}").json() == first  # served from the cache
    g0 = seeded["grpo"][0]
    upsert_eval_results(session, g0, 3, {"overall": {"n": 4, "k": 4, "per_problem": BETTER_PP}})
    session.commit()
    again = client.get(f"/api/compare/groups?run_ids={ids}").json()
    assert again["groups"][0]["evals"]["overall"]["avg_at_k"]["values"] == [0.625, 0.375, 0.375]
    upsert_step_metrics(session, g0, {4: {"time/step_s": 6.0, "reward/mean": 0.0, "flops/total": 10.0}})
    session.commit()
    assert client.get(f"/api/compare/groups?run_ids={ids}").json()["groups"][0]["steps"]["values"] == [4.0, 3.0, 3.0]
    band = client.get(f"/api/compare/curves?run_ids={ids}&keys=reward/mean").json()["groups"][0]["curves"]["reward/mean"]
    assert band["x"][-1] == 4.0 and band["n"][-1] == 1


def test_overall_is_rebuilt_from_aligned_benchmarks(client, session):
    """Runs that evaluated different numbers of problems: the stored pooled lists would pair
    problem i of one run with another problem of the other; the test must not."""
    def run(method, seed, first, second):
        rid = _run(session, method, seed, 1.0, 1.0)
        upsert_eval_results(session, rid, 3, {
            "b1": {"n": 4, "k": 4, "per_problem": first}, "b2": {"n": 4, "k": 4, "per_problem": second},
            "overall": {"n": 4, "k": 4, "per_problem": first + second}})
        return rid
    same1, same2 = [[4, 4], [4, 0], [4, 4], [4, 0]], [[4, 0], [4, 0], [4, 4], [4, 4]]
    a = run("grpo", 0, same1, same2)
    b = run("aero", 0, same1[:2], same2)  # same model, but only 2 problems of b1 evaluated
    session.commit()
    rows = client.get(f"/api/compare/groups?run_ids={a},{b}").json()["significance"]
    for bench in ("b1", "b2", "overall"):
        avg = next(r for r in rows[bench] if r["metric"] == "avg_at_k")
        assert avg["diff"] == 0.0 and avg["p_value"] == 1.0, (bench, avg)
    assert next(r for r in rows["overall"] if r["metric"] == "avg_at_k")["problems"] == 2 + 4


def test_bad_or_partial_evals_do_not_break_the_comparison(client, session):
    a = _run(session, "grpo", 0, 1.0, 1.0)
    b = _run(session, "aero", 0, 1.0, 1.0)
    c = _run(session, "aero", 1, 1.0, 1.0)
    upsert_eval_results(session, a, 3, {"overall": {"n": 8, "k": 8, "avg_at_k": 0.5, "pass_at_k": 0.9}})  # no counts, k=8
    upsert_eval_results(session, b, 3, {"overall": {"n": 2, "k": 2, "per_problem": [[2, 1], [2, 2]]}})
    upsert_eval_results(session, c, 3, {"overall": {"n": 4, "k": 4, "per_problem": [[0, 0], [4, 5]]}})  # invalid counts
    session.commit()
    r = client.get(f"/api/compare/groups?run_ids={a},{b},{c}")
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["k"] == 2
    grpo, aero = out["groups"]
    assert grpo["evals"]["overall"]["pass_at_k"]["n"] == 0  # stored at k=8, cannot be shown as Pass@2
    assert grpo["evals"]["overall"]["avg_at_k"]["values"] == [0.5]  # Avg@k does not depend on k
    assert aero["evals"]["overall"]["avg_at_k"]["values"] == [0.75]  # the invalid run's counts are ignored
    assert aero["evals"]["overall"]["steps"] == [3, 3]
    assert out["significance"] == {}  # the baseline has no per-problem counts: nothing to pair


def test_runs_without_flops_have_no_flops_axis(client, session):
    rid = repo.create_run(session, RunConfig(method="grpo", optim={"lr": 3e-5}).model_dump(mode="json"), queue="cpu").id  # _run's lr: one group
    upsert_step_metrics(session, rid, {s: {"reward/mean": 0.1 * s} for s in (1, 2, 3)})
    other = _run(session, "grpo", 1, 1.0, 5.0)
    session.commit()
    band = client.get(f"/api/compare/curves?run_ids={rid},{other}&keys=reward/mean&x=flops&points=10").json()
    curve = band["groups"][0]["curves"]["reward/mean"]
    assert curve["x"][0] == 5.0 and curve["n"] == [1] * 10  # only the run that logged FLOPs
