"""What only a real browser sees: the address a user types and the colours the data grid paints.

AppTest runs page scripts by file, not by URL, so it cannot tell that /overview answered
"Page not found"; and the Runs table is drawn on a canvas, so whether each run's progress bar
comes out in its method's colour (and not in Streamlit's theme red, as every bar once did) is
a matter of pixels. Everything AppTest can see (the figure JSON, the table's values) is tested
in test_pages.py; this one test only looks.

Cheaper than test_browser.py: no `aero up` and no training, just `streamlit run` against the
live test API of conftest.py on a seeded temp store. Playwright on Debian's /usr/bin/chromium
(scripts/install_browser.sh installs it; the `page` fixture of conftest.py); screenshots land in test-artifacts/screenshots/.
"""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.dashboard.browser import act, count, no_exception, read, screenshot_when, settle

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-artifacts" / "screenshots"
THEME_RED = (0xFF, 0x4B, 0x4B)  # Streamlit's primary colour: what every progress bar used to be
METHOD_COLOURS = {"grpo": "#4C78A8", "dapo": "#F58518", "aero": "#E45756"}  # each method's colour on every page

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
]


def rgb(hex_color: str) -> tuple[int, int, int]:
    h = hex_color.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def pixels_near(png: bytes, color: tuple[int, int, int], tol: int = 12) -> int:
    """How many pixels of a screenshot are within ``tol`` (summed over R, G, B) of ``color``."""
    import numpy as np
    from PIL import Image  # Streamlit's dependency

    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=int)
    return int((np.abs(img - np.array(color)).sum(axis=2) <= tol).sum())


@contextmanager
def streamlit_app(api, tmp_path: Path, helpers) -> Iterator[str]:
    """`streamlit run` of the dashboard against the test API ``api``; yields its URL once its
    health check answers (90 s deadline), and stops it (SIGTERM, then SIGKILL) afterwards."""
    port = helpers.free_port()
    env = {**os.environ, "AERO_API_URL": api.url, "AERO_API_TOKEN": api.token, "AERO_DATA_DIR": str(tmp_path / "none")}
    log = tmp_path / "streamlit.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", helpers.app, "--server.port", str(port),
                                 "--server.address", "127.0.0.1", "--server.headless", "true",
                                 "--browser.gatherUsageStats", "false", "--client.toolbarMode", "viewer"],
                                cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            try:
                if httpx.get(f"{url}/_stcore/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def dashboard(tmp_path, helpers):
    """The live test API on a temp store with a finished GRPO run, a finished DAPO run and a
    running AERO run, queued GRPO runs newer than all of them, and `streamlit run` on it."""
    with helpers.serve(f"sqlite:///{tmp_path / 'aero.sqlite'}", tmp_path) as api:
        ids = {"grpo": helpers.add_run(api.db_url, "grpo", steps=10, done=10, status="succeeded"),
               "dapo": helpers.add_run(api.db_url, "dapo", steps=10, done=10, status="succeeded"),
               "aero": helpers.add_run(api.db_url, "aero", steps=10, done=10, status="running", name="aero-training")}
        for _ in range(5):
            helpers.add_run(api.db_url, "grpo", steps=10, done=0, status="queued")
        with streamlit_app(api, tmp_path, helpers) as url:
            yield url, ids


def shot(pg, locator, name: str) -> bytes:
    """A screenshot of one element on the settled app, kept in test-artifacts/screenshots/ for a reader."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    return act(locator, "screenshot", path=str(SHOTS / f"{name}.png"))


def shot_when(locator, name: str, ready, timeout_s: float = 60.0) -> bytes:
    """:func:`shot` once ``ready(png)`` holds: Plotly and the data grid paint after the element
    exists (image cells once loaded, markers after layout), so a pixel check waits on what it
    checks (browser.screenshot_when), not on a fixed sleep that a loaded machine outlasts. At the
    deadline it keeps the last screenshot, and the caller's assertion says what is missing."""
    png = screenshot_when(locator, ready, timeout_s)
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / f"{name}.png").write_bytes(png)
    return png


def test_overview_address_and_method_coloured_progress_bars(page, dashboard):
    url, ids = dashboard
    pg = page
    # /overview, the address in the docs, is the Overview (it answered "Page not found")
    pg.goto(f"{url}/overview")
    pg.get_by_role("heading", name="AERO Lab", exact=True).first.wait_for()
    pg.get_by_role("heading", name="Latest runs").first.wait_for()
    # the running AERO run comes first, before the five newer queued runs
    first = pg.locator('[data-testid="stPageLink"]').filter(has_text=f"#{ids['aero']} aero-training")
    first.first.wait_for(timeout=30_000)  # the list renders after the headings: wait for it, then for the run's end
    assert count(pg.get_by_text("Page not found")) == 0
    no_exception(pg)
    assert first.count() == 1 and read(pg.locator('[data-testid="stPageLink"]').filter(has_text="#").first).strip().endswith(
        f"#{ids['aero']} aero-training")
    # and "/" still works: it opens the Overview at its own address
    pg.goto(url + "/")
    pg.wait_for_url(f"{url}/overview")
    pg.get_by_role("heading", name="Latest runs").first.wait_for()
    shot(pg, pg.locator('[data-testid="stMain"]').first, "look-overview")

    # the Runs table: each bar in its method's colour, none in the theme red
    pg.goto(f"{url}/runs")
    grid = pg.locator('[data-testid="stDataFrame"]').first
    grid.wait_for()
    # the grid draws image cells once they have loaded
    png = shot_when(grid, "look-runs-table", lambda png: all(pixels_near(png, rgb(c)) > 500 for c in METHOD_COLOURS.values()))
    counts = {m: pixels_near(png, rgb(c)) for m, c in METHOD_COLOURS.items()}
    red = pixels_near(png, THEME_RED)
    # a full bar is ~100 x 8 px at least; a method name in its colour is far fewer pixels than that
    assert all(n > 500 for n in counts.values()) and red < 50, (counts, red)


WAITING_FOR = "2 GPU(s): 0 of the Ray cluster's 4 free"


@pytest.fixture
def waiting_dashboard(tmp_path, helpers):
    """The live test API with a running GRPO run and an AERO run that waits for its GPUs (claimed,
    ``waiting_for`` set 7 minutes ago, as the worker records it), and `streamlit run` on it."""
    from datetime import timedelta

    from sqlalchemy import update

    from backend.db.models import Run, utcnow
    from backend.db.runs import record_placement

    with helpers.serve(f"sqlite:///{tmp_path / 'aero.sqlite'}", tmp_path) as api:
        ids = {"waits": helpers.add_run(api.db_url, "aero", steps=10, done=0, status="running", name="waits-for-gpus"),
               "live": helpers.add_run(api.db_url, "grpo", steps=10, done=4, status="running", name="trains")}
        with helpers.session_scope(api.db_url) as s:
            assert record_placement(s, ids["waits"], "test@host", waiting_for=WAITING_FOR)
            s.execute(update(Run).where(Run.id == ids["waits"]).values(waiting_since=utcnow() - timedelta(minutes=7)))
        with streamlit_app(api, tmp_path, helpers) as url:
            yield url, ids


def grid_rows(pg) -> dict[str, str]:
    """The Runs grid's rows as the browser holds them (the grid paints on a canvas; glide-data-grid
    keeps an accessible table of the drawn cells inside it), by run name: the row's cells."""
    grid = pg.locator('[data-testid="stDataFrame"]').first
    grid.locator('td[role="gridcell"]').first.wait_for(state="attached")
    settle(pg)
    rows = grid.locator('tbody tr[role="row"]')
    cells = [" | ".join(rows.nth(i).locator("td").all_text_contents()) for i in range(rows.count())]
    return {name: row for row in cells for name in ("waits-for-gpus", "trains") if name in row}


def test_the_run_list_shows_a_run_waiting_for_its_gpus_as_waiting(page, waiting_dashboard):
    """The Runs table: the waiting run reads 'waiting · 7m ..' with what it waits for, the other
    running run 'running'; the Status filter's 'waiting' leaves the waiting run alone. The
    Overview's latest runs say it too."""
    url, ids = waiting_dashboard
    pg = page
    pg.goto(f"{url}/runs")
    grid = pg.locator('[data-testid="stDataFrame"]').first
    grid.wait_for()
    no_exception(pg)
    headers = grid.locator('th[role="columnheader"]')
    headers.first.wait_for(state="attached")
    assert "waits for" in headers.all_text_contents()
    rows = grid_rows(pg)
    assert re.search(r"waiting · 7m \d\ds", rows["waits-for-gpus"]) and WAITING_FOR in rows["waits-for-gpus"], rows
    assert "running" in rows["trains"] and "waiting" not in rows["trains"], rows
    shot(pg, grid, "look-runs-waiting")

    status = pg.locator('[data-testid="stMultiSelect"]').filter(has_text="Status")
    act(status, "click")
    act(status.get_by_role("combobox").first, "type", "waiting")
    act(status.get_by_role("combobox").first, "press", "Enter", rerun=True)
    act(status.get_by_role("combobox").first, "press", "Escape")
    pg.get_by_text("1 run(s)").first.wait_for()
    assert list(grid_rows(pg)) == ["waits-for-gpus"]
    no_exception(pg)

    pg.goto(f"{url}/overview")
    pg.get_by_role("heading", name="Latest runs").first.wait_for()
    bar = pg.get_by_text(re.compile(r"waiting · 7m \d\ds · 0/10"))
    bar.first.wait_for(timeout=30_000)
    assert count(bar) == 1
