"""An alert's badge on Run detail, as a real browser paints it: a run that a rule stopped gets
a red badge, a run whose rule only notified an amber one, a run without alerts none; the
message a rule recorded (user-influenced text) is shown as text, never as markup. Screenshots
land in test-artifacts/screenshots/ (as test_browser_look.py's do)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.dashboard.browser import act, count, read, settle
from tests.dashboard.test_browser_look import pixels_near, rgb, shot, streamlit_app

from backend.db.alerts import record_alert, set_stop_reason
from backend.db.models import Run
from dashboard.run_extras import NOTE_COLOR, STOP_COLOR

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def alert_dashboard(tmp_path, helpers):
    """The live test API with three runs (stopped by a rule, notified by a rule, no alert) and
    `streamlit run` on it."""
    with helpers.serve(f"sqlite:///{tmp_path / 'aero.sqlite'}", tmp_path) as api:
        ids = {"stopped": helpers.add_run(api.db_url, "grpo", steps=10, done=4, status="failed", name="diverged",
                                          error="Stopped early by alert rule 0 (grad_norm_above)"),
               "noted": helpers.add_run(api.db_url, "aero", steps=10, done=10, status="succeeded", name="noted"),
               "quiet": helpers.add_run(api.db_url, "dapo", steps=10, done=10, status="succeeded", name="quiet")}
        with helpers.session_scope(api.db_url) as s:
            noted = s.get(Run, ids["noted"])
            noted.config = {**noted.config, "alerts": {"webhook_url": None, "rules": [
                {"kind": "entropy_below", "threshold": 0.05, "patience": None, "benchmark": "overall", "action": "notify"}]}}
            record_alert(s, ids["stopped"], rule=0, kind="grad_norm_above", step=4, value=73.0,
                         message="train/grad_norm = 73 at step 4, above 50", stopped=True)
            set_stop_reason(s, ids["stopped"], "alert rule 0 (grad_norm_above): train/grad_norm = 73 at step 4",
                            "test@host")
            record_alert(s, ids["noted"], rule=0, kind="entropy_below", step=9, value=0.01,
                         message="<img src=x onerror=alert(1)> entropy low", stopped=False)
        with streamlit_app(api, tmp_path, helpers) as url:
            yield url, ids


def open_run(pg, url: str, rid: int) -> None:
    pg.goto(f"{url}/run?run={rid}")
    pg.get_by_role("heading", name="Run detail").first.wait_for()
    pg.get_by_text("Notes and tags").first.wait_for(timeout=30_000)  # drawn after the badge
    settle(pg)  # the page's run has finished: what the asserts read is its last word


def test_alert_badge_colours_and_text(page, alert_dashboard):
    url, ids = alert_dashboard
    pg = page
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

    open_run(pg, url, ids["stopped"])
    badge = pg.locator(".aero-alert-badge").first
    badge.wait_for(timeout=30_000)
    assert read(badge).strip() == "1 alert · stopped the run"
    assert act(badge, "get_attribute", "title") == "grad_norm_above"
    png = shot(pg, badge, "alert-badge-stopped")
    red, amber = pixels_near(png, rgb(STOP_COLOR)), pixels_near(png, rgb(NOTE_COLOR))
    assert red > 300 and amber < 30, (red, amber)  # a filled red pill
    pg.get_by_text("Stopped early").first.wait_for(timeout=30_000)
    expect(pg.get_by_role("button", name="Resume run")).to_have_count(1, timeout=30_000)
    shot(pg, pg.locator('[data-testid="stMain"]').first, "alert-run-detail-stopped")

    open_run(pg, url, ids["noted"])
    badge = pg.locator(".aero-alert-badge").first
    badge.wait_for(timeout=30_000)
    assert read(badge).strip() == "1 alert"
    png = shot(pg, badge, "alert-badge-noted")
    red, amber = pixels_near(png, rgb(STOP_COLOR)), pixels_near(png, rgb(NOTE_COLOR))
    assert amber > 300 and red < 30, (red, amber)
    assert count(pg.get_by_role("button", name="Resume run")) == 0  # a succeeded run
    pg.get_by_text("Alerts (1 of 1 rules fired)").first.wait_for()

    open_run(pg, url, ids["quiet"])
    assert count(pg.locator(".aero-alert-badge")) == 0
    assert dialogs == []  # the recorded message's <img onerror> never ran
