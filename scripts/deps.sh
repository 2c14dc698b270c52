#!/usr/bin/env bash
# Installs what flashcore's build, tests and benchmark need on a fresh Debian 12 machine.
# Debian packages with apt-get (only when missing), Python packages pinned from PyPI.
# Usage: scripts/deps.sh [base|test]   (base: build + bench; test: + sanitizers, fuzzer, SVE/qemu, Python)
set -euo pipefail
what=${1:-test}
here=$(cd "$(dirname "$0")" && pwd)

pkgs=(cmake ninja-build g++ libgtest-dev)
if [ "$what" = test ]; then
  pkgs+=(clang libclang-rt-14-dev)           # libFuzzer + sanitizers runtime for clang
fi

"$here/apt-install.sh" "${pkgs[@]}"

if [ "$what" = test ]; then
  # Cross toolchain and qemu for the SVE tests, pinned Python packages for the Python package.
  [ -x "$here/sve-deps.sh" ] && "$here/sve-deps.sh"
  [ -x "$here/python-deps.sh" ] && "$here/python-deps.sh"
fi
echo "deps: ok"
