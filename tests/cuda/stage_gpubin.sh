#!/usr/bin/env bash
# Copies the prebuilt CUDA test/timing binaries and the runtime libraries they need into
# .gpubin/ (git-ignored through .git/info/exclude), to be carried to the device machine.
#   [GPUBIN=.gpubin-x] tests/cuda/stage_gpubin.sh [build dir] [experiment build dir]
# GPUBIN names another folder (one per engineer sharing a tree; run_on_gpu.sh reads it too).
set -eu
B=${1:-build/cuda}
G=${GPUBIN:-.gpubin}
mkdir -p "$G"
gd=$(git rev-parse --git-dir); mkdir -p "$gd/info"; grep -qx "/$G/" "$gd/info/exclude" 2>/dev/null || echo "/$G/" >> "$gd/info/exclude"
cp -f "$B/tests/cuda/flashcore_cuda_tests" "$G"/
for t in flashcore_cuda_timing flashcore_cuda_backward_tests; do
  [ -x "$B/tests/cuda/$t" ] && cp -f "$B/tests/cuda/$t" "$G"/
done
[ -x "$B/bench/flashcore-bench" ] && cp -f "$B/bench/flashcore-bench" "$G"/
# Optional second build dir (an experiment's timing binary): .gpubin/exp/ (run_on_gpu.sh: STAGES=exp).
if [ -n "${2:-}" ]; then mkdir -p "$G"/exp && cp -f "$2/tests/cuda/flashcore_cuda_timing" "$G"/exp/; fi
for lib in libcudart.so.13 libgomp.so.1; do
  p=$(ldd "$G"/flashcore_cuda_tests | awk -v l=$lib '$1 == l {print $3}')
  [ -n "$p" ] && cp -fL "$p" "$G"/
done
ls -la "$G"
