#!/usr/bin/env bash
# Installs the pinned Python packages for building and testing the flashcore Python
# package (requirements-build.txt, requirements-test.txt) with pip.
# Usage: scripts/python-deps.sh [install]
#   install: then builds and installs the package itself with
#            `pip install --no-build-isolation .` (build folder build/python/, reused);
#            FLASHCORE_CUDA=OFF in the environment gives a quick CPU-only build.
# requirements-torch.txt (PyTorch with its CUDA libraries, ~3.5 GB, ~1-2 min) too, unless
# FC_NO_TORCH=1: then the torch tests skip.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
reqs=(-r requirements-build.txt -r requirements-test.txt)
[ "${FC_NO_TORCH:-0}" = 1 ] || reqs+=(-r requirements-torch.txt)
"$py" -m pip install --disable-pip-version-check -q "${reqs[@]}"
if [ "${1:-}" = install ]; then
  "$py" -m pip install --disable-pip-version-check -q --no-build-isolation --no-deps .
fi
echo "python-deps: ok ($("$py" --version 2>&1))"
