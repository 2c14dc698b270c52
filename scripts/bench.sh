#!/usr/bin/env bash
# Builds flashcore (Release) and runs the default flashcore-bench suite, which prints a
# table. Extra arguments go to flashcore-bench (e.g. --json, --op softmax-v ...).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh base
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build/release flashcore-bench
exec build/release/bench/flashcore-bench "$@"
