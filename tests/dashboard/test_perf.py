"""The issue's quality bar: pages stay quick with 20 runs x 2,000 steps, because curves are
decimated by the API (the dashboard asks for at most a few hundred points per run).

Budgets are generous for a shared 2-core CI machine; measured here (2026-11-30): Compare over
the 20-run sweep ~1.5 s cold and ~0.2 s warm, run detail ~0.4 s, Runs ~0.2 s. The sweep has
4 seeds per method, so Compare opens in its seed-group view; the per-run view is timed too.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend.db.session import session_scope
from backend.db.sweeps import create_sweep

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
METHODS = ("grpo", "aero-s1", "aero-s1s2", "aero", "dapo")
pytestmark = pytest.mark.timing  # page-time budgets: `make test` runs these one at a time


@pytest.fixture(scope="module")
def big(tmp_path_factory, request):
    serve = request.getfixturevalue("serve_api")
    with serve(tmp_path_factory.mktemp("big")) as api:
        with session_scope(api.db_url) as s:
            api.ids["sweep"] = create_sweep(s, "big", {}).id
        add_run = request.getfixturevalue("helpers").add_run
        for i in range(20):
            add_run(api.db_url, METHODS[i % 5], steps=2000, done=2000, status="succeeded", seed=i // 5,
                    sweep_id=api.ids["sweep"], evals_at=(1000, 2000))
        yield api


def timed_run(at: AppTest) -> float:
    t = time.monotonic()
    at.run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    return time.monotonic() - t


def figures(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def figure(at: AppTest, title: str) -> dict:
    """The first figure whose title starts with ``title``."""
    return next(f for f in figures(at) if (f["layout"].get("title") or {}).get("text", "").startswith(title))


def test_compare_twenty_runs_of_2000_steps(big, use_api):
    use_api(big)
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.switch_page("app_pages/compare.py")
    at.query_params["sweep"] = str(big.ids["sweep"])
    cold = timed_run(at)
    warm = timed_run(at)
    # 5 methods x 4 seeds: seed groups, aggregated by default (a band and a mean line per group); the headline first
    assert figures(at)[0]["layout"]["title"]["text"].startswith("Held-out Avg@8 vs training FLOPs")
    at.selectbox(key="cmp_metric").set_value("reward/mean")
    metric = timed_run(at)
    curves = figure(at, "reward/mean per step")["data"]
    lines = [c for c in curves if c.get("fill") != "toself"]
    assert len(curves) == 10 and len(lines) == 5
    assert all(len(c["x"]) <= 200 and c["x"][-1] == 2000 for c in lines)  # the API's grid, to the last step
    assert cold < 15 and warm < 3 and metric < 15, (cold, warm, metric)
    at.toggle(key="cmp_agg").set_value(False)
    per_run = timed_run(at)
    curves = figure(at, "reward/mean per step")["data"]
    assert len(curves) == 20
    assert all(len(c["x"]) <= 400 and c["x"][-1] == 2000 for c in curves)  # decimated, last step kept
    assert per_run < 15, per_run
    print(f"compare 20 x 2000: grouped cold {cold:.2f} s, warm {warm:.2f} s, reward/mean {metric:.2f} s; per run (cold) {per_run:.2f} s")


def test_run_detail_and_runs_with_2000_steps(big, use_api):
    use_api(big)
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.switch_page("app_pages/run_detail.py")
    at.query_params["run"] = "1"
    detail = timed_run(at)
    reward = figure(at, "Training reward")["data"][0]
    assert len(reward["x"]) <= 600 and reward["x"][-1] == 2000
    at.switch_page("app_pages/runs.py")
    runs = timed_run(at)
    assert len(at.dataframe[0].value) == 20
    assert detail < 8 and runs < 8, (detail, runs)
