#!/usr/bin/env bash
# One device call for the CUDA forward's hostile values: the hostile-value tests of every
# kernel of the build (tests/cuda/hostile_cuda_test.cpp), the rest of the CUDA suite that
# the same kernels run (all of it but the slow DispatcherSelects), and compute-sanitizer
# on a few small cases of the new tests; logs under $OUT. About 4-6 minutes on an H200.
# Binaries come prebuilt (the device image has no GTest) in .gpubin/ (carried), as for
# run_on_gpu.sh:
#   cmake -S . -B build/cuda -G Ninja -DFLASHCORE_CUDA_ARCHS=90 && ninja -C build/cuda flashcore_cuda_tests
#   tests/cuda/stage_gpubin.sh
# STAGES (default "focus hostile suite sanitize"), SHARDS (default 8 parallel test processes),
# TIMEOUT (default 300 s each), SANITIZE_TOOLS (default "memcheck racecheck"),
# SANITIZE_TIMEOUT (default 400 s per tool).
# focus: the cases that hung, failed the launch or gave NaN on 2026-11-29
# (docs/results/cuda-hostile-2026-11-29.md), each in a process of its own (a launch failure
# poisons the rest of its process, a hang only its own), at once, FOCUS_TIMEOUT (default
# 150 s) each; those this build does not have are left out.
# More stages, each skipped once the call has run DEADLINE seconds (default: none):
#   backward  flashcore_cuda_backward_tests (staged when built), sharded
#   serving   merge_states on device tensors and the score variants' refusal, under memcheck
#   ab        forward speed, this tree's flashcore_cuda_timing ($BIN) against an older
#             build's ($BIN/old: stage it with GPUBIN=.gpubin/old tests/cuda/stage_gpubin.sh
#             OLD_BUILD), alternating, AB_ROUNDS rounds (default 3), AB_SEQS (default
#             1024,4096,16384): tests/cuda/ab_table.py's table
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
BIN=${GPUBIN:-.gpubin}
export LD_LIBRARY_PATH=$PWD/$BIN:${LD_LIBRARY_PATH:-}
STAGES=${STAGES:-focus hostile suite sanitize}
SHARDS=${SHARDS:-8}
TIMEOUT=${TIMEOUT:-300}
t0=$(date +%s)
DEADLINE=${DEADLINE:-100000}
has() { [[ " $STAGES " == *" $1 "* ]] && { (( $(date +%s) - t0 < DEADLINE )) || { echo "stage $1 skipped: past DEADLINE"; false; }; }; }
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

# shards NAME FILTER: the tests of FILTER in SHARDS processes (gtest sharding; the fp64 host
# reference is what takes the time), then their verdicts and first failures.
# TESTS names another test binary of $BIN.
shards() {
  local name=$1 filter=$2 pids=() rc=0
  for ((i = 0; i < SHARDS; ++i)); do
    OMP_WAIT_POLICY=passive GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX=$i timeout "$TIMEOUT" \
      "$BIN"/${TESTS:-flashcore_cuda_tests} --gtest_filter="$filter" > "$OUT/$name.$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || rc=1
  done
  grep -h "^\[  PASSED  \]\|^\[  FAILED  \]\|tests, listed below" "$OUT/$name".*.log | sort | uniq -c
  grep -hE "^\[  FAILED  \] .*/|Failure|got .*want|rel_err|kernel |Value of|Expected" "$OUT/$name".*.log | head -60
  echo "$name rc=$rc"
}

if has focus; then
  stamp focus
  listed=$("$BIN"/flashcore_cuda_tests --gtest_list_tests --gtest_filter='Cuda/CudaHostile.*' 2>/dev/null |
           awk '/^  /{print $1}')
  pids=()
  names=()
  for tk in HiddenNonFiniteV/fwd_sm90_f16_hd64_64x64_s2 NoFiniteScore/fwd_sm90_f16_hd64_64x64_s2 \
            HugeScores/fwd_sm90_f16_hd128_128x128_s2_p HiddenNonFiniteV/fwd_sm90_f16_hd128_128x128_s2_p \
            HiddenNonFiniteV/fwd_sm90_f16_hd128_128x128_s2 HugeScores/fwd_sm90_e4m3_hd128_64x128_s2_vt; do
    echo "$listed" | grep -qx "$tk" || continue
    name=focus.${tk//\//.}
    timeout "${FOCUS_TIMEOUT:-150}" "$BIN"/flashcore_cuda_tests --gtest_filter="Cuda/CudaHostile.$tk" \
      > "$OUT/$name.log" 2>&1 &
    pids+=($!)
    names+=("$name")
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    rc=$?
    echo "${names[$i]} rc=$rc$( ((rc == 124)) && echo ' (timed out: a hang?)')"
    grep -hE "^\[  FAILED  \] .*/|Failure|kernel |Value of|Expected|error" "$OUT/${names[$i]}.log" | head -8
  done
fi
if has hostile; then
  stamp hostile
  shards hostile 'Cuda/CudaHostile.*:CudaHostileArgs.*'
fi
if has suite; then
  stamp suite
  shards suite '*:-Cuda/CudaHostile.*:CudaHostileArgs.*:Cuda/CudaSm90.DispatcherSelects/*'
fi
if has sanitize; then
  # Small cases of every path the change added: the 16-bit sm90 rows computed again where O
  # came out non-finite (staged O through TMA, persistent), KV splits, the fp8 transposers
  # (fused, pre-pass, in-kernel "_vt"), the sm80 kernel's cleaning rerun (plain, and the
  # score variants' kernel of a tile whose rerun spills).
  # (The keys this build has: the test list's "Test/<key>" lines.)
  listed=$("$BIN"/flashcore_cuda_tests --gtest_list_tests --gtest_filter='Cuda/CudaHostile.*' 2>/dev/null |
           awk '/^  /{print $1}')
  filter=""
  for tk in HiddenNonFiniteV/fwd_sm90_f16_hd128_128x128_s2_p HugeScores/fwd_sm90_f16_hd128_128x128_s2_p \
            HiddenNonFiniteV/fwd_sm90_bf16_hd64_64x64_s2 HiddenNonFiniteV/fwd_sm90_e4m3_hd128_128x128_s2_p \
            NoFiniteScore/fwd_sm90_e4m3_hd128_64x128_s2_vt HiddenNonFiniteV/fwd_sm80_f16_hd128_128x32_w4_o2 \
            HugeScores/fwd_sm80_f16_hd128_128x32_w4_o2 NoFiniteScore/fwd_sm80_tf32_hd64_64x64_w4_o2 \
            Variants/fwd_sm80_f16_hd128_128x32_w4_o2; do
    echo "$listed" | grep -qx "$tk" && filter="$filter:Cuda/CudaHostile.$tk"
  done
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    stamp "sanitize $tool"
    timeout "${SANITIZE_TIMEOUT:-400}" compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 \
      "$BIN"/flashcore_cuda_tests --gtest_brief=1 --gtest_filter="${filter#:}" > "$OUT/sanitize.$tool.log" 2>&1
    echo "sanitize $tool rc=$?"
    grep -E "ERROR SUMMARY|Invalid|Race|hazard|FAILED" "$OUT/sanitize.$tool.log" | head -20
  done
fi
if has backward; then
  stamp backward
  TESTS=flashcore_cuda_backward_tests shards backward '*'
fi
if has serving; then
  stamp serving
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 "$BIN"/flashcore_cuda_tests \
    --gtest_filter='CudaMergeStates.*:CudaErrors.ScoreVariantsRefused' > "$OUT/serving.log" 2>&1
  echo "serving (memcheck) rc=$?"
  grep -E "ERROR SUMMARY|PASSED|FAILED|Failure" "$OUT/serving.log" | head -20
fi
if has ab; then
  stamp ab
  rm -f "$OUT/ab_rows.jsonl"
  for ((r = 0; r < ${AB_ROUNDS:-3}; ++r)); do
    if (( r % 2 == 0 )); then order="old new"; else order="new old"; fi
    for side in $order; do
      bin="$BIN"/flashcore_cuda_timing
      [ "$side" = old ] && bin="$BIN"/old/flashcore_cuda_timing
      for dt in "--dtype f16 --dtype bf16 --hdims 64,128,256" "--dtype e4m3 --hdims 128,256"; do
        # shellcheck disable=SC2086
        "$bin" $dt --seqs "${AB_SEQS:-1024,4096,16384}" --iters 20 2>> "$OUT/ab.err" |
          sed "s/^{/{\"side\":\"$side\",\"round\":$r,/" >> "$OUT/ab_rows.jsonl"
      done
    done
  done
  python3 tests/cuda/ab_table.py "$OUT/ab_rows.jsonl" | tee "$OUT/ab.txt"
fi
stamp done
# The device returns few files: the logs as one archive beside the summaries.
(cd "$OUT" && ls ./*.log > /dev/null 2>&1 && tar czf "logs-$(date +%s).tgz" ./*.log && rm -f ./*.log)
