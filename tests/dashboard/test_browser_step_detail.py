"""Run detail's step-detail sections in a real browser: the Rollouts view shows hostile model
text as text (no element is made from it), the key picker draws a chosen key, and the
histogram heatmaps paint. Screenshots are checked for pixels in the expected colours (as
test_browser_look.py does) and kept in test-artifacts/screenshots/.

`streamlit run` against the live test API of conftest.py on a seeded temp store; Playwright on
Debian's /usr/bin/chromium (the `page` fixture skips without it, or fails under AERO_REQUIRE_BROWSER=1)."""

from __future__ import annotations

from functools import partial

import pytest

from tests.dashboard import test_browser_look as look
from tests.dashboard.browser import act, choose, no_exception, read, settle
from tests.dashboard.step_details import HOSTILE, add_details
from tests.dashboard.test_browser_look import streamlit_app

pixels_near = partial(look.pixels_near, tol=24)  # anti-aliased curves: a looser match than the badges'
AERO_RED = (0xE4, 0x57, 0x56)  # AERO's method colour: the chosen key's curve
HEATMAP_DARK = (8, 48, 107)  # the darkest colour of Plotly's "Blues": a bin holding the whole step

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def shot(locator, name: str) -> bytes:
    return look.shot(None, locator, name)


@pytest.fixture
def dashboard(tmp_path, helpers):
    """The live test API with a finished AERO run that stored six steps of details and a running
    one at step 3 (its db URL to add steps), and `streamlit run` on it."""
    with helpers.serve(f"sqlite:///{tmp_path / 'aero.sqlite'}", tmp_path) as api:
        rid = helpers.add_run(api.db_url, "aero", steps=6, done=6, status="succeeded", name="aero-detail")
        add_details(api.db_url, rid, range(1, 7))
        live = helpers.add_run(api.db_url, "aero", steps=10, done=3, status="running", name="aero-live")
        add_details(api.db_url, live, range(1, 4))
        with streamlit_app(api, tmp_path, helpers) as url:
            yield url, rid, (live, api.db_url)


def page_overflow(pg) -> int:
    """How far the page is wider than the window, in CSS pixels (0: nothing runs off the side)."""
    return int(pg.evaluate("document.documentElement.scrollWidth - window.innerWidth"))


def test_a_real_models_long_chat_prompts_keep_the_layout(page, tmp_path, helpers):
    """A real model's rollouts (the chat template's system prompt, questions in words, a response
    that is one 200-character word) read as text and push nothing off the side of the page."""
    with helpers.serve(f"sqlite:///{tmp_path / 'aero.sqlite'}", tmp_path) as api:
        rid = helpers.add_run(api.db_url, "aero", steps=2, done=2, status="succeeded", name="smollm2-countdown")
        add_details(api.db_url, rid, range(1, 3), chat=True)
        with streamlit_app(api, tmp_path, helpers) as url:
            pg = page
            pg.goto(f"{url}/run?run={rid}")
            pg.get_by_text("Step 2: 9 stored rollouts match").first.wait_for(timeout=60_000)
            no_exception(pg)
            pick = pg.locator('[data-testid="stSelectbox"]').filter(has_text="Show one in full")
            choose(pick, "group 1, explore, reward 0")
            code = pg.locator('[data-testid="stCode"]').filter(has_text="You are a helpful AI assistant named SmolLM")
            code.first.wait_for()
            assert "write an expression equal to 48" in read(code.first).replace("\n", "")
            settle(pg)
            assert page_overflow(pg) <= 0, page_overflow(pg)
            table = pg.locator('[data-testid="stDataFrame"]').last
            box, window = table.bounding_box(), pg.evaluate("window.innerWidth")
            assert box is not None and box["x"] + box["width"] <= window, (box, window)
            shot(table, "step-detail-real-model-table")
            shot(code.first, "step-detail-real-model-text")


def test_rollouts_view_key_picker_and_heatmaps(page, dashboard):
    url, rid, (live, db_url) = dashboard
    pg = page
    pg.goto(f"{url}/run?run={rid}")
    pg.get_by_role("heading", name="Rollouts").first.wait_for(timeout=60_000)
    no_exception(pg)

    # Rollouts: pick the hostile response; it is shown as characters in a code block, and no
    # element (an <img> with an onerror, a <b>) was made from it
    pg.get_by_text("Step 6: 9 stored rollouts match").first.wait_for()
    pick = pg.locator('[data-testid="stSelectbox"]').filter(has_text="Show one in full")
    choose(pick, "group 1, explore, reward 0")
    code = pg.locator('[data-testid="stCode"]').filter(has_text="onerror=alert(1)")
    code.first.wait_for()
    assert HOSTILE in read(code.first).replace("\n", "")
    assert pg.locator('img[src="x"]').count() == 0 and pg.locator('[data-testid="stMain"] b').filter(has_text="bold?").count() == 0
    shot(pg.locator('[data-testid="stDataFrame"]').last, "step-detail-rollouts-table")
    shot(code.first, "step-detail-rollout-text")

    # the step slider moves the table to another step
    slider = pg.locator('[data-testid="stSlider"]').filter(has_text="Step").first.get_by_role("slider").first
    act(slider, "focus")
    act(slider, "press", "Home", rerun=True)
    pg.get_by_text("Step 1: 9 stored rollouts match").first.wait_for()

    # the key picker: choose a key the fixed charts do not show and see its curve, in AERO's colour
    picker = pg.locator('[data-testid="stMultiSelect"]').filter(has_text="Metric keys")
    act(picker, "click")
    act(picker.get_by_role("combobox").first, "type", "train/clip_frac")
    act(picker.get_by_role("combobox").first, "press", "Enter", rerun=True)
    act(picker.get_by_role("combobox").first, "press", "Escape")
    chart = pg.locator('[data-testid="stPlotlyChart"]').filter(has_text="Chosen metrics")
    chart.first.wait_for()
    png = look.shot_when(chart.first, "step-detail-key-picker", lambda png: pixels_near(png, AERO_RED) > 150)
    assert pixels_near(png, AERO_RED) > 150, pixels_near(png, AERO_RED)

    # the histogram heatmaps: a whole step in one length bin paints the darkest blue
    heat = pg.locator('[data-testid="stPlotlyChart"]').filter(has_text="Response length")
    heat.first.wait_for()
    act(heat.first, "scroll_into_view_if_needed")
    png = look.shot_when(heat.first, "step-detail-heatmap-length", lambda png: pixels_near(png, HEATMAP_DARK) > 300)
    assert pixels_near(png, HEATMAP_DARK) > 300, pixels_near(png, HEATMAP_DARK)
    shot(pg.locator('[data-testid="stPlotlyChart"]').filter(has_text="Per-prompt pass rate").first, "step-detail-heatmap-pass-rate")

    # a live run: a new step's sample reaches the Rollouts view on the page's timer, no click or reload
    from backend.db.runs import record_progress
    from backend.db.session import session_scope

    pg.goto(f"{url}/run?run={live}")
    pg.get_by_text("Step 3: 9 stored rollouts match").first.wait_for(timeout=60_000)
    settle(pg)
    add_details(db_url, live, range(4, 5))
    with session_scope(db_url) as s:
        record_progress(s, live, 4, 10)
    pg.get_by_text("Step 4: 9 stored rollouts match").first.wait_for(timeout=30_000)
