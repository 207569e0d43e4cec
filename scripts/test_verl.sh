#!/usr/bin/env bash
# Run the verl-backend tests in their own virtualenv (.venv-verl, gitignored): the driver-side
# unit tests, verl's real RayPPOTrainer on the CPU (tests/trainer/verl/test_real_fit.py: GRPO, DAPO,
# AERO, stop and resume), two FSDP ranks against one (tests/trainer/verl/test_data_parallel.py: the
# same accounting exactly, the loss to rounding, across a resume, and `aero train` with two ranks),
# two Ray nodes (tests/trainer/verl/test_multinode.py: a rank on each, a killed node fails the run
# naming it, the retry resumes), the installed real model (tests/trainer/verl/test_real_model.py: GRPO and
# AERO on smollm2-135m), a verl run through the platform (tests/worker/test_verl_e2e.py:
# REST, a Celery worker, SIGKILL and resume, cancel) and a two-node run through the platform that loses
# a node and is retried (tests/worker/test_verl_node_loss_e2e.py), which needs PostgreSQL and Redis (scripts/services.sh).
# tests/trainer/verl is collected whole: a new test file there is in this list.
#
# verl 0.9.1 pins transformers < 5.11 and pulls ray, so it cannot share the main .venv
# (transformers 5.2x). Its wheel also installs top-level `tests` and `scripts` packages; our
# pytest runs with --import-mode=importlib and tests/ has no __init__.py, so they do not
# shadow ours. The tests that need verl importorskip it, so the main suite skips them.
#
#   scripts/test_verl.sh            # creates .venv-verl on first use (~3-5 min, downloads ~1 GB), then tests
#   scripts/test_verl.sh -k collect # extra pytest arguments
#   AERO_VERL_VENV=/path scripts/test_verl.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${AERO_VERL_VENV:-.venv-verl}"

if ! "$VENV/bin/python" -c "import verl, math_verify, pytest, xdist, celery, sqlalchemy, typer, psutil, prometheus_client, gguf, accelerate" >/dev/null 2>&1; then
  echo "test_verl: creating $VENV (torch 2.13 CPU, verl 0.9.1)" >&2
  python3 -m venv "$VENV"
  # torch first, pinned, from the CPU index (TORCH_INDEX / TORCH_SPEC as for scripts/install.sh):
  # from PyPI alone it is the multi-GB CUDA build
  "$VENV/bin/python" -c "import torch" 2>/dev/null || bash scripts/install_torch.sh "$VENV/bin/python"
  "$VENV/bin/pip" install -q verl==0.9.1
  # verl's base install misses modules its trainer imports on CPU (cachetools, uvicorn, fastapi);
  # the rest is what our trainer and tests need
  "$VENV/bin/pip" install -q cachetools uvicorn fastapi "math-verify>=0.7" "pydantic>=2.7" pydantic-settings \
    pyarrow pytest pytest-timeout pytest-xdist
  # the real model's converter (trainer/models/install.py), for the suite's smollm2 fixture
  "$VENV/bin/pip" install -q "gguf>=0.10" "accelerate>=1.0"
  # the platform, for the worker end-to-end test (API, store, broker, CLI)
  "$VENV/bin/pip" install -q "sqlalchemy>=2.0" "alembic>=1.13" "celery[redis]>=5.4" "httpx>=0.27" "psycopg[binary]>=3.2" \
    "orjson>=3.9" "sse-starlette>=2" "typer>=0.12" "rich>=13" scipy \
    "psutil>=5.9" "prometheus-client>=0.17"
  "$VENV/bin/pip" install -q --no-deps -e .
fi

bash scripts/services.sh >/dev/null
# Two pytest-xdist workers, a file at a time (a module's fixtures, such as test_real_fit's shared
# GRPO and DAPO runs, are built once). They share the 2 cores, yet overlap: 1.38x on two files
# timed side by side (BENCHMARKS.md "The verl suite in two workers"). AERO_VERL_WORKERS=0: one process.
WORKERS="${AERO_VERL_WORKERS:-2}"
PARALLEL=()
[ "$WORKERS" != 0 ] && PARALLEL=(-n "$WORKERS" --dist loadfile)
exec "$VENV/bin/python" -m pytest "${PARALLEL[@]}" tests/trainer/verl tests/trainer/rollout/test_vllm.py tests/worker/test_verl_e2e.py \
  tests/worker/test_verl_node_loss_e2e.py \
  tests/worker/test_verl_placement_e2e.py \
  -p no:cacheprovider -W ignore::UserWarning -W ignore::FutureWarning -q "$@"
