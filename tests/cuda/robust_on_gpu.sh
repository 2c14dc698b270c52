#!/usr/bin/env bash
# One device call for the CUDA forward's hostile values: the hostile-value tests of every
# kernel of the build (tests/cuda/hostile_cuda_test.cpp), the rest of the CUDA suite that
# the same kernels run (all of it but the slow DispatcherSelects), and compute-sanitizer
# on a few small cases of the new tests; logs under $OUT. About 4-6 minutes on an H200.
# Binaries come prebuilt (the device image has no GTest) in .gpubin/ (carried), as for
# run_on_gpu.sh:
#   cmake -S . -B build/cuda -G Ninja -DFLASHCORE_CUDA_ARCHS=90 && ninja -C build/cuda flashcore_cuda_tests
#   tests/cuda/stage_gpubin.sh
# STAGES (default "hostile suite sanitize"), SHARDS (default 8 parallel test processes),
# TIMEOUT (default 300 s each), SANITIZE_TOOLS (default "memcheck racecheck").
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
BIN=${GPUBIN:-.gpubin}
export LD_LIBRARY_PATH=$PWD/$BIN:${LD_LIBRARY_PATH:-}
STAGES=${STAGES:-hostile suite sanitize}
SHARDS=${SHARDS:-8}
TIMEOUT=${TIMEOUT:-300}
has() { [[ " $STAGES " == *" $1 "* ]]; }
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

# shards NAME FILTER: the tests of FILTER in SHARDS processes (gtest sharding; the fp64 host
# reference is what takes the time), then their verdicts and first failures.
shards() {
  local name=$1 filter=$2 pids=() rc=0
  for ((i = 0; i < SHARDS; ++i)); do
    OMP_WAIT_POLICY=passive GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX=$i timeout "$TIMEOUT" \
      "$BIN"/flashcore_cuda_tests --gtest_filter="$filter" > "$OUT/$name.$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || rc=1
  done
  grep -h "^\[  PASSED  \]\|^\[  FAILED  \]\|tests, listed below" "$OUT/$name".*.log | sort | uniq -c
  grep -hE "^\[  FAILED  \] .*/|Failure|got .*want|rel_err|kernel |Value of|Expected" "$OUT/$name".*.log | head -60
  echo "$name rc=$rc"
}

if has hostile; then
  stamp hostile
  shards hostile 'Cuda/CudaHostile.*:CudaHostileArgs.*'
fi
if has suite; then
  stamp suite
  shards suite '*:-Cuda/CudaHostile.*:CudaHostileArgs.*:Cuda/CudaSm90.DispatcherSelects/*'
fi
if has sanitize; then
  # Small cases of every path the change added: the 16-bit sm90 V scan and row repair
  # (staged O through TMA, persistent), KV splits, the fp8 transposers (fused, pre-pass,
  # in-kernel "_vt"), the sm80 kernel's cleaning rerun.
  # (The keys this build has: the test list's "Test/<key>" lines.)
  listed=$("$BIN"/flashcore_cuda_tests --gtest_list_tests --gtest_filter='Cuda/CudaHostile.*' 2>/dev/null |
           awk '/^  /{print $1}')
  filter=""
  for tk in HiddenNonFiniteV/fwd_sm90_f16_hd128_128x128_s2_p HugeScores/fwd_sm90_f16_hd128_128x128_s2_p \
            HiddenNonFiniteV/fwd_sm90_bf16_hd64_64x64_s2 HiddenNonFiniteV/fwd_sm90_e4m3_hd128_128x128_s2_p \
            NoFiniteScore/fwd_sm90_e4m3_hd128_64x128_s2_vt HiddenNonFiniteV/fwd_sm80_f16_hd128_128x32_w4_o2 \
            HugeScores/fwd_sm80_f16_hd128_128x32_w4_o2 NoFiniteScore/fwd_sm80_tf32_hd64_64x64_w4_o2; do
    echo "$listed" | grep -qx "$tk" && filter="$filter:Cuda/CudaHostile.$tk"
  done
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    stamp "sanitize $tool"
    timeout 400 compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 \
      "$BIN"/flashcore_cuda_tests --gtest_brief=1 --gtest_filter="${filter#:}" > "$OUT/sanitize.$tool.log" 2>&1
    echo "sanitize $tool rc=$?"
    grep -E "ERROR SUMMARY|Invalid|Race|hazard|FAILED" "$OUT/sanitize.$tool.log" | head -20
  done
fi
stamp done
