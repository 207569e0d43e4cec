"""The arena's leaderboard on Compare in a real browser: a sweep of three methods x two seeds
on the live test API (conftest.py), `streamlit run`, /compare?sweep=ID. AppTest checks the
figures' JSON (test_pages.py); this test checks that the page a user opens draws the
leaderboard and the trade-off chart, each marker in its method's colour, without an error."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.dashboard.browser import act, no_exception, read
from tests.dashboard.test_browser_look import METHOD_COLOURS, pixels_near, rgb, shot, shot_when, streamlit_app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def arena_dashboard(tmp_path, helpers):
    """A sweep of GRPO, DAPO and AERO x seeds 0, 1 (evals at 0, 10, 20 with per-problem counts)
    and `streamlit run` on the live API."""
    with helpers.serve(f"sqlite:///{tmp_path / 'aero.sqlite'}", tmp_path) as api:
        with helpers.session_scope(api.db_url) as s:
            sweep = helpers.create_sweep(s, "arena", {"methods": ["grpo", "dapo", "aero"], "seeds": [0, 1]}).id
        for method in ("grpo", "dapo", "aero"):
            for seed in (0, 1):
                helpers.add_run(api.db_url, method, steps=20, done=20, status="succeeded", seed=seed, sweep_id=sweep,
                                evals_at=(0, 10, 20), vary=True)
        with streamlit_app(api, tmp_path, helpers) as url:
            yield url, sweep


def test_compare_sweep_draws_the_arena_leaderboard(page, arena_dashboard):
    url, sweep = arena_dashboard
    pg = page
    pg.goto(f"{url}/compare?sweep={sweep}")
    pg.get_by_role("heading", name="Leaderboard (rollout-allocation arena)").first.wait_for()
    board = pg.locator(".js-plotly-plot").filter(has_text=re.compile(r"diff\s*vs\s*baseline")).first  # wrapped header
    board.wait_for()
    act(board, "scroll_into_view_if_needed")
    expect(board).to_contain_text(re.compile(r"p[=<]0\.\d+"), timeout=60_000)  # drawn, p-values included
    shot(pg, board, "arena-leaderboard")
    text = read(board)
    assert "(baseline)" in text and re.search(r"p[=<]0\.\d+", text), text  # the paired test's p-value
    chart = pg.locator(".js-plotly-plot").filter(has_text=re.compile(r"Final Avg@8 vs FLOPs per step")).first
    chart.wait_for()
    pg.get_by_role("button", name="Download leaderboard (CSV)").first.wait_for()
    no_exception(pg)
    act(chart, "scroll_into_view_if_needed")
    png = shot_when(chart, "arena-tradeoff", lambda png: all(pixels_near(png, rgb(c)) > 40 for c in METHOD_COLOURS.values()))
    counts = {m: pixels_near(png, rgb(c)) for m, c in METHOD_COLOURS.items()}
    assert all(n > 40 for n in counts.values()), counts  # a marker of each method, in its colour
