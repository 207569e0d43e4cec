#!/usr/bin/env bash
# Create .venv and install AERO Lab with its dev extras. torch goes in first through
# scripts/install_torch.sh: the CPU build from https://download.pytorch.org/whl/cpu (or a local
# wheel pip already has), never PyPI's multi-GB CUDA build; on a GPU machine set TORCH_INDEX
# (e.g. cu128) and/or TORCH_SPEC, or pre-install torch. No system packages: the platform needs no
# browser, and the one the dashboard's browser tests use comes from scripts/install_browser.sh,
# which only `make test` runs.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -c "import torch" 2>/dev/null || bash scripts/install_torch.sh .venv/bin/python
.venv/bin/pip install -q -e ".[dev]"
touch .venv/.installed
