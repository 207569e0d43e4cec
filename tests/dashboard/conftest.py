"""Fixtures for the dashboard tests: a LIVE API (the real FastAPI app under uvicorn, in a thread,
on a free port, over a temp SQLite store) seeded through the backend's own store functions.
The dashboard under test reaches it over HTTP only, like in production.

Seeded runs (``seeded`` fixture), with deterministic synthetic metrics shaped like the
trainer's (docs/metrics.md):
  sweep "ladder": grpo, aero-s1, aero-s1s2, aero (succeeded, 30 steps, evals at steps 15 and 30)
  dapo (succeeded, 30 steps, evals), aero (running, 12 of 40 steps), grpo (failed, error text),
  grpo (queued).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import uvicorn

from backend.db.metrics import upsert_eval_results, upsert_step_metrics
from backend.db.migrate import migrate
from backend.db.models import utcnow
from backend.db.runs import create_run
from backend.db.session import get_engine, session_scope
from backend.db.sweeps import create_sweep
from backend.db.tokens import create_token
from backend.main import create_app
from backend.settings import Settings
from tests.ports import free_port
from trainer.spec.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "dashboard" / "app.py")
CHROMIUM = os.environ.get("AERO_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
P = 16  # prompts per step
GRPO_N = 16
TRAINED = {"grpo": 256, "dapo": 200, "aero-s1": 180, "aero-s1s2": 120, "aero": 70}
SAVED = {"s1": 76, "s2": 60, "s3": 50}  # trained rollouts saved per step: 256 - 76 - 60 - 50 = 70
USES = {"aero-s1": ("s1",), "aero-s1s2": ("s1", "s2"), "aero": ("s1", "s2", "s3")}
TOKENS_PER_ROLLOUT = 40
FLOPS_PER_TOKEN = 6e6


@pytest.fixture(scope="session", autouse=True)
def scan_components_once() -> Iterator[None]:
    """Scan the installed packages for Streamlit components once per test process, not per AppTest.

    Each ``AppTest.run()`` of a new AppTest makes a fresh component registry and rescans every
    installed distribution's metadata for component manifests: ~0.25 s of CPU per page test (three
    page-test files: 72.5 -> 54.7 CPU-s). The installed packages do not change while the suite runs, so
    the scan's result is computed once and each AppTest still registers from it into its own
    registry."""
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:  # a Streamlit without v2 components scans nothing
        yield
        return
    manifests = manifest_scanner.scan_component_manifests()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(manifest_scanner, "scan_component_manifests", lambda max_workers=None: list(manifests))
        yield


def fake_metrics(method: str, step: int, total: int) -> dict[str, float]:
    """One step's metrics: the same keys the trainer logs, simple closed forms per method."""
    f = step / max(total, 1)
    trained = TRAINED[method]
    generated = GRPO_N * P + (24 if method.startswith("aero") else 0)
    za_explore = 0.35 - 0.1 * f
    za = za_explore - (0.12 if method.startswith("aero") else 0.0)
    reward = 0.3 + 0.3 * f + (0.02 if method == "aero" else 0.0)
    train_s = trained * 0.003
    m = {
        "time/rollout_s": 0.2, "time/reward_s": 0.02, "time/train_s": train_s, "time/step_s": 0.22 + train_s,
        "time/elapsed_s": step * (0.22 + train_s),
        "rollout/generated": generated, "rollout/trained": trained,
        "tokens/generated": generated * 10, "tokens/trained": trained * TOKENS_PER_ROLLOUT,
        "flops/rollout": generated * 20 * 2e6, "flops/train": trained * TOKENS_PER_ROLLOUT * FLOPS_PER_TOKEN,
        "strata/rescue": round(P * za_explore), "strata/high": round(P * reward), "zero_acc/after_explore": za_explore,
        "zero_acc/after_rescue": za, "all_correct/ratio": 0.2 + 0.2 * f, "reward/mean": reward, "reward/trained_mean": reward,
        "adv/abs_mean": 0.6 if method.startswith("aero") else 0.45, "adv/zero_frac": 0.1 if method.startswith("aero") else 0.4,
        "loss/policy": -0.01, "train/grad_norm": 1.0 + 0.5 * math.sin(step), "train/entropy": 1.2 - 0.3 * f, "train/kl": 0.0,
        "train/clip_frac": 0.05, "optim/lr": 1e-4, "rescue/rescued": 3, "rescue/rounds": 2,
    }
    m["strata/low"] = P - m["strata/rescue"] - m["strata/high"]
    m["flops/total"] = m["flops/rollout"] + m["flops/train"]
    if method in USES:
        m["savings/grpo_rollouts"] = GRPO_N * P
        m["savings/grpo_tokens"] = GRPO_N * P * TOKENS_PER_ROLLOUT
        for s in USES[method]:
            m[f"savings/{s}_rollouts"] = SAVED[s]
            m[f"savings/{s}_tokens"] = SAVED[s] * TOKENS_PER_ROLLOUT
            m[f"savings/{s}_flops"] = SAVED[s] * TOKENS_PER_ROLLOUT * FLOPS_PER_TOKEN
            m[f"savings/{s}_s"] = SAVED[s] * 0.003
    return m


def fake_evals(method: str, step: int) -> dict[str, dict]:
    """Eval results as MetricSink.log_eval gets them: two benchmarks and 'overall'."""
    bonus = {"aero": 0.05, "dapo": 0.02}.get(method, 0.0) + step / 1000
    out = {}
    for bench, base in (("L1", 0.6), ("L2", 0.3)):
        avg = base + bonus
        out[bench] = {"n": 8, "k": 8, "avg_at_k": avg, "pass_at_k": min(1.0, avg + 0.25), "avg_ci": [avg - 0.05, avg + 0.05],
                      "pass_ci": [avg + 0.2, min(1.0, avg + 0.3)], "per_problem": [[8, 5], [8, 2]]}
    avg = (out["L1"]["avg_at_k"] + out["L2"]["avg_at_k"]) / 2
    out["overall"] = {"n": 8, "k": 8, "avg_at_k": avg, "pass_at_k": avg + 0.25, "avg_ci": [avg - 0.04, avg + 0.04],
                      "pass_ci": [avg + 0.2, avg + 0.3], "per_problem": [[8, 5], [8, 2], [8, 5], [8, 2]]}
    return out


PROBLEM_BASE = (5, 2, 6, 3, 4, 1, 7, 2)  # correct of n=8 per problem (seed groups: 8 problems per benchmark)
METHOD_GAIN = {"aero": 2, "dapo": 1}  # extra correct per problem over GRPO


def varied_evals(method: str, step: int, seed: int) -> dict[str, dict]:
    """Eval results for seed-group tests: 8 problems per benchmark whose counts depend on the
    method (AERO +2 correct per problem) and the seed (+1 on every other problem, shifted by
    seed), so groups differ and seeds spread; Avg@k / Pass@k follow from the counts."""
    out, pooled = {}, []
    for b, (bench, offset) in enumerate((("L1", 1), ("L2", -1))):
        counts = [min(8, max(0, c + offset + METHOD_GAIN.get(method, 0) + ((i + seed) % 2) * seed + (step > 15)))
                  for i, c in enumerate(PROBLEM_BASE)]
        pp = [[8, c] for c in counts]
        avg = sum(counts) / (8 * len(counts))
        pas = sum(c > 0 for c in counts) / len(counts)  # Pass@8 of n=8: any correct
        out[bench] = {"n": 8, "k": 8, "avg_at_k": avg, "pass_at_k": pas, "avg_ci": [avg - 0.05, avg + 0.05],
                      "pass_ci": [max(0.0, pas - 0.1), pas], "per_problem": pp}
        pooled += pp
    avg = sum(c for _, c in pooled) / (8 * len(pooled))
    pas = sum(c > 0 for _, c in pooled) / len(pooled)
    out["overall"] = {"n": 8, "k": 8, "avg_at_k": avg, "pass_at_k": pas, "avg_ci": [avg - 0.04, avg + 0.04],
                      "pass_ci": [max(0.0, pas - 0.1), pas], "per_problem": pooled}
    return out


def varied_metrics(method: str, step: int, total: int, seed: int) -> dict[str, float]:
    """fake_metrics with a seed effect: time and FLOPs scaled by 1 + 0.05 seed, reward up and
    zero-accuracy down by 0.01 seed, so a seed group has a band of non-zero width."""
    m = fake_metrics(method, step, total)
    scale = 1 + 0.05 * seed
    for k in list(m):
        if k.startswith(("time/", "flops/")):
            m[k] *= scale
    m["reward/mean"] += 0.01 * seed
    m["zero_acc/after_rescue"] = max(0.0, m["zero_acc/after_rescue"] - 0.01 * seed)
    return m


REACH_CURVES = {  # overall Avg@8 at steps 0, 5, 10, 15, 20 (reach tests), plus 0.01 x seed
    "grpo": (0.30, 0.35, 0.40, 0.45, 0.50),  # final .45 (last 3), gain .15; smoothed .3 .325 .35 .4 .45
    "aero": (0.30, 0.45, 0.50, 0.50, 0.50),  # smoothed .3 .375 .417 .483 .5: every target, sooner
    "dapo": (0.30, 0.30, 0.30, 0.30, 0.30),  # never learns: "not reached"
}


def reach_evals(method: str, step: int, seed: int) -> dict[str, dict]:
    """An 'overall' evaluation (no per-problem counts) following :data:`REACH_CURVES`."""
    avg = REACH_CURVES[method][step // 5] + 0.01 * seed
    return {"overall": {"n": 8, "k": 8, "avg_at_k": avg, "pass_at_k": min(1.0, avg + 0.2),
                        "avg_ci": [avg - 0.04, avg + 0.04], "pass_ci": [avg + 0.1, min(1.0, avg + 0.3)]}}


def config(method: str, steps: int, seed: int = 0) -> dict:
    return RunConfig(method=method, steps=steps, seed=seed, eval_every=15).model_dump(mode="json")


def add_run(url: str, method: str, *, steps: int, done: int, status: str, seed: int = 0, sweep_id: int | None = None,
            error: str | None = None, evals_at: tuple[int, ...] = (), tags: tuple[str, ...] = (), name: str | None = None,
            vary: bool = False, evals_of=None) -> int:
    """Insert a run in ``status`` with ``done`` steps of fake metrics (and evals at ``evals_at``);
    ``vary``: metrics and per-problem evals that depend on the seed (seed-group tests);
    ``evals_of(step)``: the evaluation results at a step, instead of the built-in ones."""
    metrics_of = (lambda t: varied_metrics(method, t, steps, seed)) if vary else (lambda t: fake_metrics(method, t, steps))
    if evals_of is None:
        evals_of = (lambda t: varied_evals(method, t, seed)) if vary else (lambda t: fake_evals(method, t))
    with session_scope(url) as s:
        run = create_run(s, config(method, steps, seed), queue="cpu", sweep_id=sweep_id, tags=tags, name=name)
        run.status, run.current_step, run.progress, run.error = status, done, done / steps, error
        if status != "queued":
            run.started_at, run.worker, run.attempts = utcnow(), "test@host", 1
        if status in ("succeeded", "failed", "cancelled"):
            run.finished_at = utcnow()
        if done:
            upsert_step_metrics(s, run.id, {t: metrics_of(t) for t in range(1, done + 1)})
        for t in evals_at:
            upsert_eval_results(s, run.id, t, evals_of(t))
        return run.id


@dataclass
class LiveApi:
    url: str
    db_url: str
    token: str
    enqueued: list = field(default_factory=list)
    ids: dict[str, int] = field(default_factory=dict)


@contextmanager
def serve(db_url: str, tmp: Path) -> Iterator[LiveApi]:
    """The real app under uvicorn in a thread; runs are recorded instead of sent to a broker."""
    migrate(db_url)
    with session_scope(db_url) as s:
        _, token = create_token(s, "dashboard-tests")
    api = LiveApi("", db_url, token)
    app = create_app(Settings(database_url=db_url, data_dir=tmp / "data", migrate_on_start=False),
                     enqueue=lambda run_id, queue: api.enqueued.append((run_id, queue)))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    api.url = f"http://127.0.0.1:{port}"
    try:
        yield api
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        get_engine(db_url).dispose()


@pytest.fixture(scope="session")
def seeded(tmp_path_factory) -> Iterator[LiveApi]:
    tmp = tmp_path_factory.mktemp("dash")
    url = f"sqlite:///{tmp / 'aero.sqlite'}"
    with serve(url, tmp) as api:
        with session_scope(url) as s:
            sweep_id = create_sweep(s, "ladder", {"methods": ["grpo", "aero-s1", "aero-s1s2", "aero"]}).id
        for m in ("grpo", "aero-s1", "aero-s1s2", "aero"):
            api.ids[m] = add_run(url, m, steps=30, done=30, status="succeeded", sweep_id=sweep_id, evals_at=(15, 30), tags=("ladder",))
        api.ids["sweep"] = sweep_id
        api.ids["dapo"] = add_run(url, "dapo", steps=30, done=30, status="succeeded", evals_at=(30,))
        api.ids["running"] = add_run(url, "aero", steps=40, done=12, status="running", seed=1, name="live-aero")
        api.ids["failed"] = add_run(url, "grpo", steps=30, done=3, status="failed", seed=2,
                                    error="Traceback (most recent call last):\n  ...\nRuntimeError: CUDA out of memory (test)")
        api.ids["queued"] = add_run(url, "grpo", steps=30, done=0, status="queued", seed=3)
        yield api


@pytest.fixture(scope="session")
def seed_groups(tmp_path_factory) -> Iterator[LiveApi]:
    """A live API with sweep "seeds": GRPO x seeds 0, 1, 2 and AERO x seeds 0, 1 (20 steps each,
    seed-dependent metrics and per-problem evals at steps 10 and 20), plus one DAPO run alone."""
    tmp = tmp_path_factory.mktemp("groups")
    url = f"sqlite:///{tmp / 'aero.sqlite'}"
    with serve(url, tmp) as api:
        with session_scope(url) as s:
            sweep_id = create_sweep(s, "seeds", {"methods": ["grpo", "aero"], "seeds": [0, 1, 2]}).id
        api.ids["sweep"] = sweep_id
        for method, seeds in (("grpo", (0, 1, 2)), ("aero", (0, 1))):
            for seed in seeds:
                api.ids[f"{method}{seed}"] = add_run(url, method, steps=20, done=20, status="succeeded", seed=seed,
                                                     sweep_id=sweep_id, evals_at=(10, 20), vary=True)
        api.ids["dapo"] = add_run(url, "dapo", steps=20, done=20, status="succeeded", evals_at=(20,), vary=True)
        yield api


@pytest.fixture(scope="session")
def reach_groups(tmp_path_factory) -> Iterator[LiveApi]:
    """A live API with sweep "reach": GRPO, AERO and DAPO x seeds 0, 1 (20 steps, seed-dependent
    costs), each evaluated at steps 0, 5, 10, 15, 20 along :data:`REACH_CURVES`: AERO reaches
    every fraction of GRPO's gain sooner, DAPO none."""
    tmp = tmp_path_factory.mktemp("reach")
    url = f"sqlite:///{tmp / 'aero.sqlite'}"
    with serve(url, tmp) as api:
        with session_scope(url) as s:
            api.ids["sweep"] = create_sweep(s, "reach", {"methods": ["grpo", "aero", "dapo"], "seeds": [0, 1]}).id
        for method in REACH_CURVES:
            for seed in (0, 1):
                api.ids[f"{method}{seed}"] = add_run(url, method, steps=20, done=20, status="succeeded", seed=seed,
                                                     sweep_id=api.ids["sweep"], evals_at=(0, 5, 10, 15, 20), vary=True,
                                                     evals_of=lambda t, m=method, sd=seed: reach_evals(m, t, sd))
        yield api


@pytest.fixture(scope="session")
def empty_api(tmp_path_factory) -> Iterator[LiveApi]:
    tmp = tmp_path_factory.mktemp("empty")
    with serve(f"sqlite:///{tmp / 'aero.sqlite'}", tmp) as api:
        yield api


@pytest.fixture
def fresh_api(tmp_path) -> Iterator[LiveApi]:
    """An empty live API of its own (for tests that change runs)."""
    with serve(f"sqlite:///{tmp_path / 'aero.sqlite'}", tmp_path) as api:
        yield api


@pytest.fixture(scope="session")
def serve_api():
    """serve_api(tmp_dir) -> a context manager yielding a new empty LiveApi stored under tmp_dir."""
    return lambda tmp: serve(f"sqlite:///{Path(tmp) / 'aero.sqlite'}", Path(tmp))


@pytest.fixture(scope="session")
def helpers() -> SimpleNamespace:
    """The seeding helpers for test modules (importing conftest by name is not reliable under
    --import-mode=importlib)."""
    return SimpleNamespace(app=APP, add_run=add_run, fake_metrics=fake_metrics, varied_metrics=varied_metrics,
                           varied_evals=varied_evals, reach_evals=reach_evals, free_port=free_port, create_sweep=create_sweep,
                           session_scope=session_scope, serve=serve)


@pytest.fixture
def use_api(monkeypatch):
    """use_api(api) points the dashboard (AERO_API_URL / AERO_API_TOKEN) at ``api``."""

    def use(api: LiveApi | str, token: str | None = None) -> None:
        url = api if isinstance(api, str) else api.url
        monkeypatch.setenv("AERO_API_URL", url)
        tok = token if token is not None else ("" if isinstance(api, str) else api.token)
        monkeypatch.setenv("AERO_API_TOKEN", tok)
        monkeypatch.setenv("AERO_DATA_DIR", "/nonexistent-aero-data")  # no token-file fallback in tests

    return use


@pytest.fixture
def page():
    """A Playwright page on Debian's headless chromium (no browser download). Without one the
    test skips, saying how to install it; with AERO_REQUIRE_BROWSER=1 (CI) it fails instead.
    Request it before any fixture that starts the platform, so a skip costs nothing. Every
    document it loads tracks the app's runs (tests/dashboard/browser.py): act through
    ``browser.act`` / ``browser.settle``, never on a page mid-rerun."""
    if not Path(CHROMIUM).exists():
        why = (f"no Chromium at {CHROMIUM}: install Debian's with `sudo bash scripts/install_browser.sh` "
               "(`make test` runs it), or set AERO_CHROMIUM to a Chromium binary")
        if os.environ.get("AERO_REQUIRE_BROWSER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 900})
        pg.set_default_timeout(60_000)
        from tests.dashboard import browser as tracked

        tracked.install(pg)
        yield pg
        browser.close()
