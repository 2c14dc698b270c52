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
  [ -f "$here/sve-deps.sh" ] || true
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "$what" = test ]; then
  # Cross toolchain and qemu for the SVE tests, pinned Python packages for the Python package.
  [ -x "$here/sve-deps.sh" ] && "$here/sve-deps.sh"
  [ -x "$here/python-deps.sh" ] && "$here/python-deps.sh"
fi
echo "deps: ok"
