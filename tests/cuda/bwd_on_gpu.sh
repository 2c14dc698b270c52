#!/usr/bin/env bash
# One device call for the CUDA attention backward (src/cuda/bwd_*, kernels/bwd_sm90.cuh, bwd_sm80.cuh):
#   build     cmake + ninja on the machine's cores: flashcore_cuda_backward_tests and
#             flashcore_cuda_bwd_timing for sm_90a, f16 / bf16 instances only (both backward
#             families, bwd_sm90 and bwd_sm80, and the forward's)
#   tests     the backward's tests (gtest shards in parallel processes), with, beside them,
#   sanitize  compute-sanitizer memcheck and synccheck on small cases and racecheck on every
#             instance forced by key
#   timing    flashcore_cuda_bwd_timing: the bf16 grid (D 64, 128; S 512..16384, B = 16384/S,
#             H = 2048/D, causal and not), every instance and the backend's choice, and a
#             deterministic row of the backend's choice
#   peers     bench/peers/sdpa_bwd_peers.py: PyTorch SDPA's FlashAttention-2 and cuDNN
#             backward on the same grid, then bench/peers/compare.py's table (ratios > 1.0:
#             flashcore faster) and the deterministic mode's cost
# Logs and tables come back under $OUT (logs.tgz, table.md, the JSON lines).
# GoogleTest is not on the device image: its sources travel. Once, in the repo root here:
#   cp -r /usr/src/googletest .gtest && echo /.gtest/ >> .git/info/exclude
# then the device tool: run(command="bash tests/cuda/bwd_on_gpu.sh", carry=[".gtest"], timeout_s=600)
# STAGES (default "build tests sanitize timing peers") picks stages; HDIMS (default 64,128),
# SEQS (default 512,1024,2048,4096,8192,16384) and ITERS (default 10) the grid and its
# medians; TESTS_FILTER narrows the tests. Should one call not finish in its 600 s (the
# build's time there is not known yet), a second with STAGES="timing peers" on the warm
# machine reuses the build (build/ is ignored: it stays between calls).
set -u
OUT=${OUT:-/tmp/out}
LOG=${LOG:-/tmp/fc_bwd_logs}
B=${BUILD:-build/bwd_gpu}
STAGES=${STAGES:-build tests sanitize timing peers}
HDIMS=${HDIMS:-64,128}
SEQS=${SEQS:-512,1024,2048,4096,8192,16384}
ITERS=${ITERS:-10}  # timed calls per row (medians), flashcore's and the peers'
mkdir -p "$OUT"
rm -rf "$LOG" && mkdir -p "$LOG"
has() { [[ " $STAGES " == *" $1 "* ]]; }
t0=$(date +%s)
# Every stamp re-packs the logs, so a call stopped at its limit still returns them.
stamp() { echo "[$(($(date +%s) - t0))s] $*"; tar czf "$OUT/logs.tgz" -C "$LOG" . 2>/dev/null; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1; } > "$LOG/device.txt" 2>&1
cat "$LOG/device.txt"

if has build; then
  stamp build
  gt=()
  [ -d .gtest ] && gt=(-DFLASHCORE_GTEST_SOURCE="$PWD/.gtest")
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHCORE_BUILD_BENCH=OFF -DFLASHCORE_CUDA=ON \
    -DFLASHCORE_CUDA_ARCHS=90 "-DFLASHCORE_CUDA_DTYPES=f16;bf16" "-DFLASHCORE_CUDA_HDIMS=64;96;128;256" "${gt[@]}" \
    > "$LOG/build.log" 2>&1 &&
    ninja -C "$B" -j "$(nproc)" flashcore_cuda_backward_tests flashcore_cuda_bwd_timing >> "$LOG/build.log" 2>&1
  rc=$?
  echo "build rc=$rc"
  grep -E "warning|error" "$LOG/build.log" | sort | uniq -c | head -20
  if [ $rc -ne 0 ]; then tail -40 "$LOG/build.log"; stamp stopped; exit 1; fi
fi
T=$B/tests/cuda/flashcore_cuda_backward_tests
CS="compute-sanitizer --error-exitcode 9"
small='Cuda/CudaBackward.MatchesReference/tiny_d64_f16:Cuda/CudaBackward.MatchesReference/odd_7x100_d64_bf16'
small="$small:Cuda/CudaBackward.MatchesReference/gqa4_causal_sq_gt_sk_d128_f16:Cuda/CudaBackward.MatchesReference/varlen_*"
small="$small:Cuda/CudaBackward.MatchesReference/bhsd_pad_d256_bf16:CudaBackwardKernels.ZeroSizedProblems:CudaBackwardErrors.*"
if has sanitize; then
  # Beside the tests (their own processes on the one GPU); waited for after them.
  stamp sanitize
  (timeout 300 $CS --tool memcheck "$T" --gtest_brief=1 --gtest_filter="$small" > "$LOG/memcheck.log" 2>&1
    echo "memcheck rc=$?" >> "$LOG/memcheck.log") &
  (timeout 300 $CS --tool synccheck "$T" --gtest_brief=1 --gtest_filter="$small" > "$LOG/synccheck.log" 2>&1
    echo "synccheck rc=$?" >> "$LOG/synccheck.log") &
  (timeout 300 $CS --tool racecheck "$T" --gtest_brief=1 --gtest_filter='CudaBackwardKernels.EveryInstanceForced' \
    > "$LOG/racecheck.log" 2>&1; echo "racecheck rc=$?" >> "$LOG/racecheck.log") &
fi
if has tests; then
  stamp tests
  pids=()
  for ((i = 0; i < 8; ++i)); do
    OMP_WAIT_POLICY=passive GTEST_TOTAL_SHARDS=8 GTEST_SHARD_INDEX=$i timeout 300 "$T" \
      --gtest_filter="${TESTS_FILTER:-*}" > "$LOG/tests.$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "tests shard $i rc=$?"; done
  grep -hE "^\[  (PASSED|FAILED|SKIPPED) |Failure|rel_err|Which is|Value of|Expected|impl " "$LOG"/tests.*.log | head -60
  grep -h "^\[       OK \]" "$LOG"/tests.*.log | sed 's/.*OK \] //' | sort -t'(' -k2 -n -r | head -5
fi
if has sanitize; then
  wait
  stamp sanitized
  tail -n 3 "$LOG"/memcheck.log "$LOG"/synccheck.log "$LOG"/racecheck.log
  grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Hazard|Barrier" "$LOG"/*check.log | sort | uniq -c | head -20
fi
if has timing; then
  stamp timing
  timeout 240 "$B/tests/cuda/flashcore_cuda_bwd_timing" --dtype bf16 --hdims "$HDIMS" --seqs "$SEQS" --all-tiles \
    --deterministic --iters "$ITERS" > "$LOG/flashcore_bwd.jsonl" 2> "$LOG/timing.err"
  echo "timing rc=$?"
fi
if has peers; then
  stamp peers
  PYTHONUNBUFFERED=1 timeout 200 python3 bench/peers/sdpa_bwd_peers.py --dtype bf16 --hdims "$HDIMS" --seqs "$SEQS" \
    --iters "$ITERS" > "$LOG/peers_bwd.jsonl" 2> "$LOG/peers.err"
  echo "peers rc=$?"
  tail -2 "$LOG/peers.err"
fi
if [ -s "$LOG/flashcore_bwd.jsonl" ] && [ -s "$LOG/peers_bwd.jsonl" ]; then
  python3 bench/peers/compare.py "$LOG/flashcore_bwd.jsonl" "$LOG/peers_bwd.jsonl" > "$LOG/table.md"
  cat "$LOG/table.md"
fi
if [ -s "$LOG/flashcore_bwd.jsonl" ]; then
  # The deterministic mode's cost and each kernel's time, per shape (us).
  python3 - "$LOG/flashcore_bwd.jsonl" <<'EOF' | tee "$LOG/kernels.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and '"us"' in l]
by = {}
for r in rows:
    by.setdefault((r["D"], r["S"], r["causal"]), []).append(r)
for k, rs in by.items():
    auto = [r for r in rs if r["dispatcher"] and not r["deterministic"]]
    det = [r for r in rs if r["deterministic"]]
    cells = ", ".join(f"{r['kernel']}{' det' if r['deterministic'] else ''} {r['us']:.0f}" for r in rs)
    cost = f"det/auto {det[0]['us'] / auto[0]['us']:.2f}x" if auto and det else ""
    print(f"D{k[0]} S{k[1]}{' causal' if k[2] else ''}: {cells} {cost}")
EOF
fi
cp -f "$LOG"/table.md "$LOG"/kernels.md "$LOG"/flashcore_bwd.jsonl "$LOG"/peers_bwd.jsonl "$OUT"/ 2>/dev/null
stamp done
