#!/usr/bin/env bash
# One device call: the CUDA tests, compute-sanitizer (memcheck + racecheck) on a few
# small cases, flashcore's timing rows and the PyTorch SDPA peers, logs under $OUT.
# Binaries come prebuilt (no GTest on the device image) in .gpubin/ (carried):
#   cmake -S . -B build/cuda -G Ninja -DFLASHCORE_CUDA_ARCHS=90 && ninja -C build/cuda flashcore_cuda_tests flashcore_cuda_timing
#   tests/cuda/stage_gpubin.sh
# STAGES (default "info tests sanitize timing peers") picks what runs.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
BIN=.gpubin
export LD_LIBRARY_PATH=$PWD/$BIN:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
STAGES=${STAGES:-info tests sanitize timing peers}
TIMING_ARGS=${TIMING_ARGS:---all-tiles}
has() { [[ " $STAGES " == *" $1 "* ]]; }
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

if has info; then
  { date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv; nvcc --version | tail -2; } > "$OUT/device.txt" 2>&1
  cat "$OUT/device.txt"
fi
if has tests; then
  stamp tests
  timeout 300 $BIN/flashcore_cuda_tests --gtest_brief=1 > "$OUT/tests.log" 2>&1; echo "tests rc=$?" | tee -a "$OUT/tests.log"
  grep -E "FAILED|PASSED|SKIPPED \]|Failure|rel_err|Which is|Value of|Expected|kernel " "$OUT/tests.log" | head -60
fi
if has sanitize; then
  stamp sanitize
  CS="compute-sanitizer --error-exitcode 9"
  small='Cuda/CudaDtype.CausalUnequalLengths/f16:Cuda/CudaDtype.Varlen/*:Cuda/CudaDtype.PaddedHeadDims/bf16:CudaErrors.*:CudaF32.*'
  timeout 200 $CS --tool memcheck $BIN/flashcore_cuda_tests --gtest_brief=1 --gtest_filter="$small" > "$OUT/sanitizer.log" 2>&1
  echo "memcheck rc=$?" | tee -a "$OUT/sanitizer.log"
  timeout 150 $CS --tool racecheck $BIN/flashcore_cuda_tests --gtest_brief=1 --gtest_filter='Cuda/CudaDtype.Varlen/f16:Cuda/CudaDtype.LocalWindows/bf16' >> "$OUT/sanitizer.log" 2>&1
  echo "racecheck rc=$?" | tee -a "$OUT/sanitizer.log"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Hazard" "$OUT/sanitizer.log" | sort | uniq -c | head -20
fi
if has timing; then
  stamp timing
  timeout 200 $BIN/flashcore_cuda_timing $TIMING_ARGS > "$OUT/flashcore.jsonl" 2> "$OUT/timing.err"; echo "timing rc=$?"
fi
if has peers; then
  stamp peers
  timeout 200 python3 bench/peers/sdpa_peers.py > "$OUT/peers.jsonl" 2> "$OUT/peers.err"; echo "peers rc=$?"
  tail -3 "$OUT/peers.err"
fi
if [ -s "$OUT/flashcore.jsonl" ] && [ -s "$OUT/peers.jsonl" ]; then
  python3 bench/peers/compare.py "$OUT/flashcore.jsonl" "$OUT/peers.jsonl" > "$OUT/table.md"
  cat "$OUT/table.md"
fi
stamp done
