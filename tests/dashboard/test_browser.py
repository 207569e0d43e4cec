"""End to end in a real browser: `aero up` (API, Celery worker on the embedded SQLite broker,
reaper, dashboard) in a temp data dir, driven by Playwright on Debian's chromium.

Submits a tiny AERO run through the Launch form, watches its step count rise on the run page
without a page reload (the live fragment), launches the ablation-ladder sweep, then finds the
waterfalls and the benchmark table on Compare, and finally compares a GRPO/AERO x 2 seeds sweep
(the headline charts side by side on top with the compute-to-reach heading, seed bands in the
Plotly figures, a p-value in the Table-1 table). A full-page screenshot of every page lands in
test-artifacts/screenshots/ (gitignored; CI keeps it as an artifact).

Needs /usr/bin/chromium (scripts/install_browser.sh installs it; `make test` runs it); no browser download.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from playwright.sync_api import expect

from tests.dashboard.browser import act, count, no_exception, read, settle
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-artifacts" / "screenshots"
# Long enough (~0.5 s a step at 64 prompts on 2 cores) that the run page opens before the run
# ends: 4 steps of 4 prompts finished in ~1 s, before the page first showed a step, and 12 steps
# once outran the launch page's screenshot and the run page's first draw (1 of 10 loops, loaded).
STEPS = 24

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(420),
]


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"aero up exited {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} not up after {timeout}s:\n{log.read_text(errors='replace')[-3000:]}")


def logs(data: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in sorted((data / "logs").glob("*.log")))


@pytest.fixture
def platform(tmp_path):
    """`aero up` on free ports with a private data dir (SQLite store, embedded broker)."""
    api_port, dash_port = free_port(), free_port()
    data = tmp_path / "data"
    env = {**os.environ, "AERO_DATA_DIR": str(data), "AERO_BROKER_POLL_S": "0.2", "AERO_SINK_FLUSH_S": "0",
           "AERO_HEARTBEAT_S": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    for var in ("DATABASE_URL", "REDIS_URL", "AERO_API_URL", "AERO_API_TOKEN"):
        env.pop(var, None)
    log = tmp_path / "up.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "cli", "up", "--api-port", str(api_port), "--dashboard-port", str(dash_port)],
                                cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{api_port}/api/health", proc, log)
        wait_http(f"http://127.0.0.1:{dash_port}/_stcore/health", proc, log)
        yield SimpleNamespace(api=f"http://127.0.0.1:{api_port}", dash=f"http://127.0.0.1:{dash_port}", data=data, log=log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # aero up stops its children in order
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def screenshot(pg, name: str) -> Path:
    """Full page: Streamlit scrolls inside its main container, so grow the viewport to fit it."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = pg.evaluate("() => (document.querySelector('[data-testid=\"stMainBlockContainer\"]') || document.body).scrollHeight")
    pg.set_viewport_size({"width": 1400, "height": max(900, int(height) + 160)})
    settle(pg)  # Plotly and the data grid redraw at the new size (an artifact: no assertion reads it)
    path = SHOTS / f"{name}.png"
    pg.screenshot(path=str(path), full_page=True)
    pg.set_viewport_size({"width": 1400, "height": 900})
    return path


def open_page(pg, url: str, heading: str) -> None:
    pg.goto(url)
    pg.get_by_role("heading", name=heading, exact=True).first.wait_for()
    settle(pg)


def set_number(pg, label: str, value, expander: str | None = None) -> None:
    """Type a number into a field (a rerun when it changes the value); a field in a collapsed
    ``expander`` opens it first. Each step acts on the settled page: an expander clicked while
    the previous field's rerun was redrawing the form could collapse again (seen on a loaded
    machine)."""
    box = pg.get_by_label(label, exact=True).first
    if expander is not None:
        settle(pg)
        if not box.is_visible():
            act(pg.get_by_text(expander, exact=True).first, "click")
    act(box, "fill", str(value))
    act(box, "press", "Tab")
    expect(box).to_have_value(str(value))


def step_of(pg) -> tuple[int, int]:
    text = read(pg.locator('[data-testid="stMetric"]').filter(has_text="Step").first)
    done, total = re.search(r"(\d+)\s*/\s*(\d+)", text).groups()
    return int(done), int(total)


# Every band trace (fill='toself') in the page's Plotly figures once at least `min` are drawn, else null.
BANDS_JS = """(min) => {
  const out = [];
  for (const el of document.querySelectorAll('.js-plotly-plot')) {
    for (const t of (el.data || [])) {
      if (t.fill === 'toself') out.push({group: t.legendgroup, fill: t.fill, fillcolor: t.fillcolor,
                                          points: (t.x || []).filter(v => v !== null).length});
    }
  }
  return out.length >= min ? out : null;
}"""


def launch_seed_sweep(platform) -> int:
    """POST a 2 methods x 2 seeds sweep of tiny 2-step runs, evaluated at steps 0, 1 and 2 (the
    headline's curves need more than one point), and wait until every run finished."""
    token = (platform.data / "admin.token").read_text().strip()
    body = {"name": "seeds", "methods": ["grpo", "aero"], "seeds": [0, 1],
            "base": {"preset": "tiny", "steps": 2, "batch_prompts": 4, "eval_every": 1, "eval_problems": 4}}
    with httpx.Client(base_url=platform.api + "/api", headers={"Authorization": f"Bearer {token}"}, timeout=30) as api:
        resp = api.post("/sweeps", json=body)
        assert resp.status_code == 201, resp.text
        sid = resp.json()["id"]
        deadline = time.monotonic() + 240
        while any(r["status"] in ("queued", "running") for r in api.get(f"/sweeps/{sid}").json()["runs"]):
            assert time.monotonic() < deadline, logs(platform.data)
            time.sleep(1)
        runs = api.get(f"/sweeps/{sid}").json()["runs"]
    assert [r["status"] for r in runs] == ["succeeded"] * 4, [(r["id"], r["status"], r["error"]) for r in runs]
    return sid


def test_launch_watch_compare_in_a_browser(page, platform):
    pg = page
    open_page(pg, platform.dash + "/", "AERO Lab")
    pg.get_by_text("No runs yet").first.wait_for()
    no_exception(pg)
    screenshot(pg, "overview")

    # -- Launch one tiny AERO run through the form
    open_page(pg, platform.dash + "/launch", "Launch")
    set_number(pg, "steps", STEPS)
    set_number(pg, "batch (prompts per step)", 64)
    set_number(pg, "eval every (steps)", 0, expander="Expert settings")
    set_number(pg, "eval problems per benchmark", 4, expander="Expert settings")
    act(pg.get_by_role("button", name="Launch"), "click", rerun=True)
    pg.get_by_text(re.compile(r"Run #\d+ \(aero-seed0\) is queued")).first.wait_for()
    run_id = int(re.search(r"Run #(\d+)", read(pg.get_by_text(re.compile(r"Run #\d+ .* is queued")).first)).group(1))
    no_exception(pg)  # the Launch page's screenshot is the sweep's, below: the run page opens while the run trains

    # -- Its page: the step count rises while the page stays loaded (no navigation, no reload)
    act(pg.get_by_role("link", name=f"Watch run #{run_id} live").first, "click", rerun=True)
    pg.wait_for_url(re.compile(rf"/run\?run={run_id}$"))
    pg.locator('[data-testid="stMetric"]').filter(has_text="Step").first.wait_for()
    pg.evaluate("() => { window.__sameDocument = true; }")
    seen, deadline = [], time.monotonic() + 240
    while time.monotonic() < deadline:
        seen.append(step_of(pg)[0])
        if seen[-1] == STEPS and count(pg.get_by_text("succeeded")):
            break
        pg.wait_for_timeout(300)
    else:
        raise AssertionError(f"run {run_id} did not finish; steps seen {seen}\n{logs(platform.data)}")
    assert seen == sorted(seen) and seen[0] < STEPS, seen  # it rose, never went back
    assert len(set(seen)) >= 2, seen
    assert pg.evaluate("() => window.__sameDocument === true"), "the run page reloaded"
    pg.get_by_text("Latest evaluation per benchmark").first.wait_for()  # the finished page shows the evals
    pg.get_by_role("heading", name="Evaluation").first.wait_for()
    no_exception(pg)
    screenshot(pg, "run")

    # -- The ablation ladder as a sweep (GRPO, AERO S1, AERO S1+S2, AERO), tiny
    open_page(pg, platform.dash + "/launch", "Launch")
    act(pg.get_by_role("radio", name="Sweep"), "click", rerun=True)
    pg.get_by_label("steps", exact=True).first.wait_for()
    set_number(pg, "steps", 2)
    set_number(pg, "batch (prompts per step)", 4)
    set_number(pg, "eval every (steps)", 0, expander="Expert settings")
    set_number(pg, "eval problems per benchmark", 2, expander="Expert settings")
    act(pg.get_by_role("button", name="Launch"), "click", rerun=True)
    pg.get_by_text(re.compile(r"Sweep #\d+ \(sweep\) queued 4 runs")).first.wait_for()
    no_exception(pg)
    screenshot(pg, "launch")

    with httpx.Client(base_url=platform.api + "/api") as api:
        deadline = time.monotonic() + 240
        while any(r["status"] in ("queued", "running") for r in api.get("/runs").json()["data"]):
            assert time.monotonic() < deadline, logs(platform.data)
            time.sleep(1)
        runs = api.get("/runs").json()["data"]
    assert {r["status"] for r in runs} == {"succeeded"}, [(r["id"], r["status"], r["error"]) for r in runs]

    open_page(pg, platform.dash + "/runs", "Runs")
    pg.locator('[data-testid="stDataFrame"]').first.wait_for()
    no_exception(pg)
    screenshot(pg, "runs")

    open_page(pg, platform.dash + "/sweeps", "Sweeps")
    pg.get_by_text(re.compile(r"Sweep #\d+ · sweep")).first.wait_for()
    no_exception(pg)
    screenshot(pg, "sweeps")

    # -- Compare the sweep: the measured waterfall, Fig. 9 and the benchmark table
    open_page(pg, platform.dash + "/compare", "Compare")
    pg.get_by_role("heading", name="Where AERO saves compute (paper Fig. 8)").first.wait_for()
    pg.locator(".js-plotly-plot").filter(has_text="S1 early rescue").first.wait_for()
    # both waterfalls (the second may still be drawing when the first shows): wait, don't count once
    expect(pg.locator(".js-plotly-plot").filter(has_text="measured from ablation runs")).to_have_count(2, timeout=60_000)
    pg.get_by_role("heading", name="Benchmarks and cost (paper Table 1)").first.wait_for()
    pg.locator(".js-plotly-plot").filter(has_text=re.compile(r"Avg@8\s*total")).first.wait_for()  # wrapped header cell
    pg.locator(".js-plotly-plot").filter(has_text=re.compile(r"Pass@8\s*total")).first.wait_for()
    pg.get_by_role("button", name="Download table (CSV)").first.wait_for()
    no_exception(pg)
    screenshot(pg, "compare")

    # -- and the single run's counterfactual waterfall
    open_page(pg, platform.dash + f"/compare?runs={run_id}", "Compare")
    pg.locator(".js-plotly-plot").filter(has_text=f"counterfactual accounting, run #{run_id}").first.wait_for()
    no_exception(pg)
    screenshot(pg, "compare-one-run")

    # -- Seed groups: GRPO and AERO x seeds 0, 1 (REST, with the admin token `aero up` wrote), then the headline,
    #    bands and p-values
    sid = launch_seed_sweep(platform)
    open_page(pg, platform.dash + f"/compare?sweep={sid}", "Compare")
    pg.get_by_text("Aggregate seeds").first.wait_for()
    # the paper's headline on top: accuracy vs FLOPs and vs time side by side, then compute to reach GRPO's accuracy
    pg.get_by_role("heading", name="Compute to reach GRPO's accuracy").first.wait_for()
    flops = pg.locator(".js-plotly-plot").filter(has_text="Held-out Avg@8 vs training FLOPs").first
    time_ = pg.locator(".js-plotly-plot").filter(has_text="Held-out Avg@8 vs training time").first
    flops.wait_for()
    time_.wait_for()
    a, b = act(flops, "bounding_box"), act(time_, "bounding_box")
    assert abs(a["y"] - b["y"]) < 5 and a["x"] < b["x"], (a, b)  # side by side
    first_plot = act(pg.locator(".js-plotly-plot").first, "bounding_box")
    assert first_plot["y"] >= a["y"] - 1, "the headline is not the first chart"
    settle(pg)
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / "compare-headline.png"))  # the top of the page, as a reader first sees it
    pg.get_by_role("heading", name="Benchmarks (paper Table 1)").first.wait_for()
    bands = pg.wait_for_function(BANDS_JS, arg=2).json_value()  # Plotly keeps each figure's traces on its div
    assert {b["group"] for b in bands} >= {"grpo", "aero"}, bands
    assert all(b["fill"] == "toself" and b["fillcolor"].startswith("rgba(") and b["points"] >= 3 for b in bands), bands
    p_value = pg.locator(".js-plotly-plot").filter(has_text=re.compile(r"Total\s*\(P-value\)")).filter(
        has_text=re.compile(r"\(p[=<]\d\.\d{3}\)"))
    p_value.first.wait_for()
    assert count(pg.locator(".js-plotly-plot").filter(has_text="(—)")) >= 1  # the baseline's Total cell
    no_exception(pg)
    screenshot(pg, "compare-seeds")
    assert {"overview.png", "launch.png", "run.png", "runs.png", "sweeps.png", "compare.png",
            "compare-headline.png"} <= {p.name for p in SHOTS.glob("*.png")}
