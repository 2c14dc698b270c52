#!/usr/bin/env bash
# One device call: the CUDA tests, compute-sanitizer (memcheck + racecheck) on a few
# small cases, flashcore's timing rows and the PyTorch SDPA peers, logs under $OUT.
# Binaries come prebuilt (no GTest on the device image) in .gpubin/ (carried):
#   cmake -S . -B build/cuda -G Ninja -DFLASHCORE_CUDA_ARCHS=90 && ninja -C build/cuda flashcore_cuda_tests flashcore_cuda_timing
#   tests/cuda/stage_gpubin.sh
# STAGES (default "info tests sass sanitize timing peers") picks what runs ("smoke" first: a
# short run of the sm90 tests that ends the batch if they fail or hang); "exp" also times
# experiment builds' timing binaries (.gpubin/exp*/flashcore_cuda_timing, EXP_ARGS) and
# "profile" runs Nsight Compute on one flashcore and one PyTorch flash launch (PROFILE_SHAPE).
# TIMING_DTYPES (default "f16 bf16 f32"; e4m3 too) and PEER_DTYPE (default all) pick the dtypes,
# HDIMS (default "64,128,256") the grid's head dims for both (PEERS_ARGS: more arguments of
# sdpa_peers.py, e.g. --gqa, beside TIMING_ARGS' --gqa); SANITIZE_SM80=0 skips the
# sm80 sanitizer subset (the sm90 one always runs; SANITIZE_TOOLS, default "memcheck
# racecheck synccheck", its tools). TESTS_FILTER (default all) narrows the tests stage, TESTS_TIMEOUT
# (default 300 s) bounds each of its TESTS_SHARDS (default 8) parallel processes. "sass" counts the wgmma
# (HGMMA, QGMMA for fp8) and local-memory instructions per kernel in the test binary (cuobjdump)
# and checks the sm90 main loops with tests/cuda/sass_check.py.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# Logs go to LOG and come back as one archive ($OUT/logs.tgz; the device tool returns at
# most 8 files), the tables also as plain files.
LOG=${LOG:-/tmp/fc_logs}
rm -rf "$LOG"; mkdir -p "$LOG"
BIN=${GPUBIN:-.gpubin}  # GPUBIN: another staging folder (one per engineer)
export LD_LIBRARY_PATH=$PWD/$BIN:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
STAGES=${STAGES:-info tests sass sanitize timing peers}
TIMING_ARGS=${TIMING_ARGS:---all-tiles}
TIMING_DTYPES=${TIMING_DTYPES:-f16 bf16 f32}
PEER_DTYPE=${PEER_DTYPE:-all}
HDIMS=${HDIMS:-64,128,256}
dtype_args() { for d in $TIMING_DTYPES; do printf -- '--dtype %s ' "$d"; done; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
t0=$(date +%s)
# Every stamp also re-packs the logs, so a run stopped at its time limit still returns them.
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; tar czf "$OUT/logs.tgz" -C "$LOG" . 2>/dev/null; }

if has info; then
  { date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv; nvcc --version | tail -2; } > "$LOG/device.txt" 2>&1
  cat "$LOG/device.txt"
fi
if has smoke; then
  # A short first look at the Hopper kernels: a hang (mbarrier phases) or wrong results
  # end the batch here instead of burning the other stages' time.
  stamp smoke
  # (Not DispatcherSelects: its fp64 references on 132-head shapes take ~170 s per dtype in a
  # build with every head dim; the tests stage runs it.)
  timeout 150 $BIN/flashcore_cuda_tests --gtest_brief=1 --gtest_filter='Cuda/CudaSm90.Small/*' > "$LOG/smoke.log" 2>&1
  rc=$?; echo "smoke rc=$rc" | tee -a "$LOG/smoke.log"
  if [ $rc -ne 0 ]; then grep -E "FAILED|Failure|rel_err|Which is|Expected|kernel |Value of" "$LOG/smoke.log" | head -40; stamp stopped; exit 1; fi
fi
if has tests; then
  # TESTS_SHARDS processes (default 8) share the tests (gtest sharding): the fp64 host
  # reference is what takes the time (OpenMP over batch x heads; passive waits, as the shards
  # share the cores), and the device host has cores to spare.
  stamp tests
  pids=()
  for ((i = 0; i < ${TESTS_SHARDS:-8}; ++i)); do
    OMP_WAIT_POLICY=passive GTEST_TOTAL_SHARDS=${TESTS_SHARDS:-8} GTEST_SHARD_INDEX=$i timeout ${TESTS_TIMEOUT:-300} $BIN/flashcore_cuda_tests \
      --gtest_filter="${TESTS_FILTER:-*}" > "$LOG/tests.$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "tests shard $i rc=$?" >> "$LOG/tests.log"; done
  cat "$LOG/tests.log"
  grep -hE "^\[  (PASSED|FAILED|SKIPPED) |Failure|rel_err|Which is|Value of|Expected|kernel " "$LOG"/tests.*.log | head -60
  # Slowest tests (and the one running at a timeout: a RUN line without its OK).
  grep -h "^\[       OK \]" "$LOG"/tests.*.log | sed 's/.*OK \] //' | sort -t'(' -k2 -n -r | head -5
fi
if has sass; then
  stamp sass
  cuobjdump --dump-sass $BIN/flashcore_cuda_tests 2>/dev/null | awk '
    /Function :/ { f = $3 }
    /HGMMA|QGMMA/ { g[f]++ } /LDL|STL/ { l[f]++ } /HMMA/ { h[f]++ }
    END { for (k in g) printf "%s HGMMA/QGMMA %d HMMA %d local %d\n", k, g[k], h[k], l[k] }' > "$LOG/sass.txt"
  cat "$LOG/sass.txt"
  # The sm90 main loops: wgmmas asynchronous, P V's wait below the softmax, no spills.
  cuobjdump --dump-sass $BIN/flashcore_cuda_tests 2>/dev/null | python3 tests/cuda/sass_check.py > "$LOG/sass_check.txt"
  echo "sass_check rc=$?" | tee -a "$LOG/sass_check.txt"
  grep -v "^ok" "$LOG/sass_check.txt" | head -30
fi
if has sanitize; then
  stamp sanitize
  CS="compute-sanitizer --error-exitcode 9"
  if [ "${SANITIZE_SM80:-1}" = 1 ]; then
    small='Cuda/CudaDtype.CausalUnequalLengths/f16:Cuda/CudaDtype.Varlen/*:Cuda/CudaDtype.PaddedHeadDims/bf16:CudaErrors.*:CudaF32.*'
    small="$small:Cuda/CudaDtype.CausalUnequalLengths/f32:Cuda/CudaDtype.PaddedHeadDims/f32:Cuda/CudaDtype.ForcedTiles/f32"
    small="$small:Dtypes/CudaVariants.Varlen/f16"  # the score variants' kernels (softcap, ALiBi, sinks)
    timeout 240 $CS --tool memcheck $BIN/flashcore_cuda_tests --gtest_brief=1 --gtest_filter="$small" > "$LOG/sanitizer.log" 2>&1
    echo "memcheck rc=$?" | tee -a "$LOG/sanitizer.log"
    timeout 150 $CS --tool racecheck $BIN/flashcore_cuda_tests --gtest_brief=1 --gtest_filter='Cuda/CudaDtype.Varlen/f16:Cuda/CudaDtype.LocalWindows/bf16:Cuda/CudaDtype.Varlen/f32:Cuda/CudaDtype.LocalWindows/f32' >> "$LOG/sanitizer.log" 2>&1
    echo "racecheck rc=$?" | tee -a "$LOG/sanitizer.log"
  fi
  # Hopper kernels (TMA, mbarriers, wgmma; fp8 with its V^T pre-pass): memcheck, racecheck
  # and synccheck on small cases (SANITIZE_FILTER90 replaces the set).
  small90=${SANITIZE_FILTER90:-'Cuda/CudaSm90.Small/*:CudaSm90Errors.*:Cuda/CudaFp8.Small/*:CudaFp8Errors.*'}
  # The tools run side by side (separate processes on the one GPU).
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
    ( timeout ${SANITIZE_TIMEOUT:-150} $CS --tool $tool $BIN/flashcore_cuda_tests --gtest_brief=1 --gtest_filter="$small90" > "$LOG/sanitizer.$tool.log" 2>&1
      echo "sm90 $tool rc=$?" >> "$LOG/sanitizer.$tool.log" ) &
  done
  wait
  cat "$LOG"/sanitizer.*.log >> "$LOG/sanitizer.log"
  grep -h "sm90 .* rc=" "$LOG"/sanitizer.*.log
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Hazard" "$LOG/sanitizer.log" | sort | uniq -c | head -20
fi
if has timing; then
  stamp timing
  timeout 300 $BIN/flashcore_cuda_timing $TIMING_ARGS --hdims "$HDIMS" $(dtype_args) > "$LOG/flashcore.jsonl" 2> "$LOG/timing.err"; echo "timing rc=$?"
fi
if has exp; then
  # Each experiment build's timing binary (.gpubin/exp*/), right after the main one.
  for d in $BIN/exp*/; do
    [ -x "$d/flashcore_cuda_timing" ] || continue
    n=$(basename "$d")
    stamp "$n"
    timeout 300 "$d/flashcore_cuda_timing" ${EXP_ARGS:---all-tiles --dtype f16} --hdims "$HDIMS" > "$LOG/$n.jsonl" 2> "$LOG/$n.err"; echo "$n rc=$?"
  done
fi
if has peers; then
  stamp peers
  timeout 200 python3 bench/peers/sdpa_peers.py --dtype "$PEER_DTYPE" --hdims "$HDIMS" ${PEERS_ARGS:-} > "$LOG/peers.jsonl" 2> "$LOG/peers.err"; echo "peers rc=$?"
  tail -3 "$LOG/peers.err"
fi
if has bench && [ -x $BIN/flashcore-bench ]; then
  stamp bench
  FB="timeout 60 $BIN/flashcore-bench --backend cuda"
  {
    $FB --dtype f32 --batch 1 --heads 2 --seq-q 700 --head-dim 64 --check
    $FB --dtype f32 --batch 1 --heads 4 --kv-heads 2 --seq-q 1000 --seq-k 3000 --head-dim 96 --causal --check
    $FB --dtype f32 --batch 2 --heads 16 --seq-q 2048 --head-dim 128 --check
    $FB --dtype f32 --batch 2 --heads 16 --seq-q 2048 --head-dim 128 --impl fwd_sm80_f32_hd256_simt --check
    $FB --dtype f32 --batch 2 --heads 8 --seq-q 2048 --head-dim 256 --causal --check
    $FB --dtype f16 --batch 1 --heads 8 --seq-q 512 --head-dim 64 --check
  } > "$LOG/bench.txt" 2>&1; echo "bench rc=$?"
  cat "$LOG/bench.txt"
fi
if has profile; then
  stamp profile
  # PROFILE_SHAPE="B H S D causal(0/1)"; one launch each, clocks left alone.
  read -r PB PH PS PD PC <<< "${PROFILE_SHAPE:-8 16 2048 128 0}"
  NCU="ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats --launch-skip 3 --launch-count 1"
  timeout 120 $NCU -k regex:fwd_sm80 $BIN/flashcore_cuda_timing --profile "$PB $PH $PS $PD $PC" > "$LOG/ncu_flashcore.txt" 2>&1; echo "ncu flashcore rc=$?"
  timeout 120 $NCU -k regex:flash_fwd python3 -c "
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q, k, v = (torch.randn($PB, $PS, $PH, $PD, device='cuda', dtype=torch.float16).transpose(1, 2) for _ in range(3))
with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
    for _ in range(6): F.scaled_dot_product_attention(q, k, v, is_causal=bool($PC))
torch.cuda.synchronize()" > "$LOG/ncu_flash.txt" 2>&1; echo "ncu flash rc=$?"
  for f in "$LOG"/ncu_*.txt; do echo "== $f"; grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc A|Stall|Warp Cycles Per Issued|Shared Memory Configuration Size|Dynamic Shared|Block Size|Grid Size|Executed Instructions  " "$f" | head -30; done
fi
if [ -s "$LOG/flashcore.jsonl" ] && [ -s "$LOG/peers.jsonl" ]; then
  python3 bench/peers/compare.py "$LOG/flashcore.jsonl" "$LOG/peers.jsonl" > "$LOG/table.md"
  cat "$LOG/table.md"
fi
for f in "$LOG"/exp*.jsonl; do
  [ -s "$f" ] && [ -s "$LOG/peers.jsonl" ] || continue
  n=$(basename "$f" .jsonl)
  python3 bench/peers/compare.py "$f" "$LOG/peers.jsonl" > "$LOG/table_$n.md"
done
cp -f "$LOG"/table*.md "$OUT"/ 2>/dev/null
stamp done
