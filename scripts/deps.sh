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

# The pinned Python packages (pip, ~1 min of downloads with PyTorch) install beside the
# Debian packages (apt): neither needs the other. Their output follows apt's.
pylog=""
if [ "$what" = test ] && [ -x "$here/python-deps.sh" ]; then
  pylog=$(mktemp)
  "$here/python-deps.sh" >"$pylog" 2>&1 &
  pypid=$!
fi
"$here/apt-install.sh" "${pkgs[@]}"
if [ "$what" = test ]; then
  # Cross toolchain and qemu for the SVE tests.
  [ -x "$here/sve-deps.sh" ] && "$here/sve-deps.sh"
fi
if [ -n "$pylog" ]; then
  rc=0
  wait "$pypid" || rc=$?
  cat "$pylog"; rm -f "$pylog"
  [ "$rc" = 0 ] || { echo "deps: python-deps.sh failed ($rc)"; exit "$rc"; }
fi
echo "deps: ok"
