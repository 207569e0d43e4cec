"""/api/runs/{id}/rollouts (paginated, filtered), /histograms and /metrics/keys on stored step
details, on SQLite and PostgreSQL; the texts come back exactly as stored (hostile ones too),
and a resume deletes the details past its checkpoint."""

import pytest

from backend.db import runs as repo
from backend.db.metrics import delete_steps_after, upsert_step_metrics
from backend.db.rollouts import upsert_step_details
from trainer.spec.config import RunConfig

HOSTILE = "<script>alert('x')</script> **bold** [link](javascript:1) :red[hi] \x1b[31mred\x00 \u202eevil"


def rollout(group: int, row: int, reward: float, stratum: str, stage: str, text: str = "", rnd: int = 0) -> dict:
    return {"group": group, "row": row, "prompt": f"{group}+{group}=", "response": text or f"answer {row}",
            "reward": reward, "correct": reward > 0.5, "advantage": None if stage == "curated out" else reward - 0.5,
            "stratum": stratum, "round": rnd, "stage": stage, "length": row + 1, "truncated": row % 3 == 0,
            "clipped": False}


def detail(step: int) -> dict:
    rows = [rollout(0, i, 0.0, "rescue", "explore") for i in range(4)]
    rows += [rollout(0, 4, 1.0, "rescue", "rescue 1", rnd=1), rollout(0, 5, 0.0, "rescue", "curated out", rnd=1)]
    rows += [rollout(1, 6 + i, float(i % 2), "low", "explore", text=HOSTILE if i == 0 else "") for i in range(4)]
    pass_rate = [0] * 10
    pass_rate[min(9, step)] = 2
    return {"rollouts": rows, "histograms": {"pass_rate": {"lo": 0.0, "hi": 1.0, "counts": pass_rate},
                                              "length": {"lo": 0.0, "hi": 16.0, "counts": [step] * 16}}}


@pytest.fixture
def run_id(session):
    run = repo.create_run(session, RunConfig(steps=10).model_dump(mode="json"), queue="cpu")
    upsert_step_metrics(session, run.id, {s: {"reward/mean": s / 10, "system/rss_mb": 100.0 + s} for s in range(1, 6)})
    upsert_step_details(session, run.id, {s: detail(s) for s in range(1, 6)})
    session.commit()
    return run.id


def test_rollouts_page_filters_and_default_step(client, run_id):
    get = lambda q="": client.get(f"/api/runs/{run_id}/rollouts{q}")  # noqa: E731
    body = get().json()
    assert body["step"] == 5 and body["steps"] == [1, 2, 3, 4, 5] and body["count"] == 10 and len(body["data"]) == 10
    page = get("?step=2&limit=4&offset=8").json()
    assert (page["count"], [r["row"] for r in page["data"]]) == (10, [8, 9])
    assert [r["row"] for r in get("?step=2&stratum=rescue").json()["data"]] == [0, 1, 2, 3, 4, 5]
    assert [r["row"] for r in get("?step=2&stage=rescue").json()["data"]] == [4]  # "rescue 1" is a rescue stage
    assert [r["row"] for r in get("?step=2&stage=curated%20out").json()["data"]] == [5]
    assert [r["row"] for r in get("?step=2&min_reward=0.5").json()["data"]] == [4, 7, 9]
    assert [r["row"] for r in get("?step=2&max_reward=0.5&stratum=low").json()["data"]] == [6, 8]
    assert get("?step=2&stage=curated%20out").json()["data"][0]["advantage"] is None


def test_model_text_comes_back_as_stored(client, run_id):
    row = next(r for r in client.get(f"/api/runs/{run_id}/rollouts?step=3&stratum=low").json()["data"] if r["row"] == 6)
    assert row["response"] == HOSTILE.replace("\x00", "\ufffd")  # NUL replaced at storage; nothing else touched


def test_rollouts_errors_name_the_field(client, run_id):
    assert client.get(f"/api/runs/{run_id}/rollouts?step=9").status_code == 404  # no sample at that step
    assert client.get("/api/runs/999999/rollouts").status_code == 404
    for q, field in (("stratum=middle", "stratum"), ("limit=0", "limit"), ("limit=501", "limit"), ("offset=-1", "offset"),
                     ("stage=nope", "stage"), ("step=-1", "step")):
        r = client.get(f"/api/runs/{run_id}/rollouts?{q}")
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == field


def test_no_sample_yet_is_an_empty_answer(client, session):
    run = repo.create_run(session, RunConfig().model_dump(mode="json"), queue="cpu")
    session.commit()
    body = client.get(f"/api/runs/{run.id}/rollouts").json()
    assert (body["steps"], body["data"], body["count"]) == ([], [], 0)
    assert client.get(f"/api/runs/{run.id}/histograms").json()["steps"] == []
    assert client.get(f"/api/runs/{run.id}/metrics/keys").json()["keys"] == []


def test_histograms_columnar_and_decimated(client, run_id):
    h = client.get(f"/api/runs/{run_id}/histograms").json()
    assert h["steps"] == [1, 2, 3, 4, 5] and sorted(h["histograms"]) == ["length", "pass_rate"]
    pr = h["histograms"]["pass_rate"]
    assert (pr["lo"], pr["hi"], pr["bins"]) == (0.0, 1.0, 10) and pr["counts"][2][3] == 2 and sum(pr["counts"][2]) == 2
    assert h["histograms"]["length"]["counts"][4] == [5] * 16
    assert client.get(f"/api/runs/{run_id}/histograms?max_steps=2").json()["steps"] == [1, 5]  # the last step kept


def test_metric_keys_lists_every_logged_key(client, run_id):
    assert client.get(f"/api/runs/{run_id}/metrics/keys").json() == {"run_id": run_id, "keys": ["reward/mean", "system/rss_mb"]}


def test_resume_deletes_details_past_the_checkpoint(client, session, run_id):
    delete_steps_after(session, run_id, 3)
    session.commit()
    assert client.get(f"/api/runs/{run_id}/rollouts").json()["steps"] == [1, 2, 3]
    assert client.get(f"/api/runs/{run_id}/histograms").json()["steps"] == [1, 2, 3]
    upsert_step_details(session, run_id, {3: {"rollouts": [], "histograms": {}}})  # a re-logged step replaces its row
    session.commit()
    assert client.get(f"/api/runs/{run_id}/rollouts?step=3").json()["count"] == 0
