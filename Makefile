# One command each: `make up` starts the platform (embedded defaults + demo sweep);
# `make test` runs the whole test suite. Both install into .venv on first use; only `make test`
# also installs a browser (chromium, for the dashboard's browser tests). `make lint` runs ruff
# and mypy (settings in pyproject.toml); CI runs it before the tests.
.PHONY: install up lint test test-fast bench

.venv/.installed: pyproject.toml scripts/install.sh scripts/install_torch.sh
	bash scripts/install.sh

install: .venv/.installed

up: .venv/.installed
	.venv/bin/aero up --demo

lint: .venv/.installed
	.venv/bin/ruff check .
	.venv/bin/mypy

# Two passes: everything but the wall-clock budgets in two pytest-xdist workers (one core each),
# handed out one test at a time (--maxschedchunk 1), the slow end-to-end tests spread over the
# first half (tests/conftest.py) so in-process tests fill the cores around their waits; then the
# tests that assert wall-clock budgets (marked timing) one at a time, with nothing beside them,
# collected from the files that mark them only (collecting the whole suite again costs ~8 s;
# collection refuses a timing test anywhere else, tests/conftest.py).
# `pytest` alone runs everything in one process.
TIMING_FILES = $(shell grep -rlE 'mark\.timing' tests --include='test_*.py' | sort)

test: .venv/.installed
	bash scripts/install_browser.sh
	bash scripts/services.sh
	.venv/bin/python -m pytest -q -n 2 --maxschedchunk 1 -m "not timing"
	.venv/bin/python -m pytest -q -m timing $(TIMING_FILES)

# The unit tier alone (tests/conftest.py::tier_of: no process, service or training), for a quick
# signal while editing; `make test` stays the whole suite.
test-fast: .venv/.installed
	.venv/bin/python -m pytest -q -n 2 -m unit

bench: .venv/.installed
	.venv/bin/aero bench --preset tiny --steps 60 --seed 0 --ablations --json runs/bench.json
