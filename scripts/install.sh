#!/usr/bin/env bash
# Create .venv and install AERO Lab with its dev extras. Installs a CPU torch wheel first
# (TORCH_SPEC, default torch==2.13.0) so pip never pulls a multi-GB CUDA build on a laptop;
# on a GPU machine set TORCH_SPEC to the CUDA build you want, or pre-install torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/pip install -q "${TORCH_SPEC:-torch==2.13.0}"
.venv/bin/pip install -q -e ".[dev]"
command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)
touch .venv/.installed
