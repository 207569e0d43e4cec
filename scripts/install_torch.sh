#!/usr/bin/env bash
# Install torch into a virtualenv before the project, from a named index. Left to pip and the
# public index alone, `torch==2.13.0` on Linux is the CUDA build, which pulls cuda-toolkit,
# cuDNN, NCCL and Triton (gigabytes) onto a laptop that trains on CPU.
#
#   bash scripts/install_torch.sh .venv/bin/python
#
#   TORCH_SPEC     the requirement, or a path to a wheel (default torch==2.13.0)
#   TORCH_INDEX    where to get it: a build variant of https://download.pytorch.org/whl/
#                  (cpu, cu126, cu128, ...) or a full index URL such as a mirror; the same
#                  values as docker/Dockerfile's TORCH_INDEX build argument (default cpu)
#   TORCH_TIMEOUT  seconds pip waits on that index before it gives up (default 15, one retry)
#
# With TORCH_INDEX unset, a wheel that pip can have without any index (its configured
# find-links, a local wheelhouse) is used first, so an offline machine needs no network.
set -euo pipefail
PY=${1:?usage: install_torch.sh PYTHON}
SPEC=${TORCH_SPEC:-torch==2.13.0}
INDEX=${TORCH_INDEX:-cpu}
case "$INDEX" in
  *://*) URL=$INDEX ;;
  *) URL="https://download.pytorch.org/whl/$INDEX" ;;
esac
WHEELS=$(mktemp -d)
trap 'rm -rf "$WHEELS"' EXIT

pip() { "$PY" -m pip --disable-pip-version-check "$@"; }

# The wheel alone (--no-deps) into a temp dir, then that file is installed: the named index
# serves torch only, and its dependencies (sympy, networkx, ...) come from pip's usual index.
if [ -z "${TORCH_INDEX:-}" ] && pip download -q --no-deps --no-index -d "$WHEELS" "$SPEC" >/dev/null 2>&1; then
  echo "install_torch: $SPEC from a local wheel, no index needed" >&2
else
  echo "install_torch: $SPEC from $URL" >&2
  # A short timeout and one retry: pip's defaults wait minutes on a host that drops packets.
  if ! pip download -q --no-deps --index-url "$URL" --timeout "${TORCH_TIMEOUT:-15}" --retries 1 \
       -d "$WHEELS" "$SPEC"; then
    cat >&2 <<EOF
install_torch: could not get $SPEC from $URL.
  Reach that index, or set TORCH_INDEX to one you can reach: a variant (cpu, cu126, cu128)
  or a mirror's URL; set TORCH_SPEC to another version or to a wheel file you have;
  or install torch into the virtualenv yourself and run this again (an installed torch is kept).
EOF
    exit 1
  fi
fi
pip install -q "$WHEELS"/*.whl
