#!/usr/bin/env bash
# Old build against new on a Hopper GPU (the device machine: nvcc, CMake, ninja, python3; no
# GTest, no network), for a change that must not slow anything down (the CUDA parts refactor
# of 2026-11-29: docs/results/cuda-parts-refactor-2026-11-29.md).
#   tests/cuda/ab_refactor.sh OLD_SRC_DIR          (in the repository root: the new tree)
# OLD_SRC_DIR: a plain copy of the old sources, e.g. made here and carried to the device:
#   mkdir -p .ab_old && git archive 94678b3 | tar -x -C .ab_old && echo /.ab_old/ >> .git/info/exclude
# Both trees are configured alike (Release, FLASHCORE_CUDA_ARCHS=90: the sm80 family for
# sm_90 and the sm90 family, dtypes f16, bf16, e4m3, head dims 64, 128, 256, no tests, no
# bench) into build/ab_old and build/ab_new, built side by side (the library, then each
# tree's own tests/cuda/cuda_timing.cpp linked to it by hand: the device image has no GTest),
# and timed by flashcore_cuda_timing (the dispatcher's kernel, CUDA events, median of ITERS
# calls) in ROUNDS rounds, old and new alternating (round r: old first for even r, new first
# for odd r): the 16-bit grid (f16 and bf16, D 64 / 128 / 256, S 512 .. 16384 by powers of two,
# B = 16384 / S, H = 2048 / D, causal or not: 72 rows) and the e4m3 rows (D 128 / 256, the
# same S and masks: 24 rows). Prints per row the kernel (and whether both trees picked the
# same), old and new microseconds (medians over the rounds), the speed ratio old_us / new_us
# (> 1: the new tree is faster) with its range over the rounds, then the geometric mean and
# the rows below 0.98x. Logs and the JSON rows go to $OUT (default /tmp/ab_out).
# STAGES (default "build time") picks the stages: a build finished by an earlier call is
# reused (ninja does nothing), so a call that ran out of time can be followed by STAGES=time.
# Budget on 16 cores: the two builds ~3-4 minutes together, each sweep ~30-45 s (96 rows),
# 6 sweeps.
set -u
[ $# -ge 1 ] && [ -d "$1" ] || { echo "usage: $0 OLD_SRC_DIR" >&2; exit 2; }
old_src=$(cd "$1" && pwd)
new_src=$(pwd)
OUT=${OUT:-/tmp/ab_out}
mkdir -p "$OUT"
STAGES=${STAGES:-build time}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-20}
SEQS=${SEQS:-512,1024,2048,4096,8192,16384}
AB_DTYPES=${AB_DTYPES:-f16;bf16;e4m3}  # the configured axes (narrower ones for a quick check of the script)
AB_HDIMS=${AB_HDIMS:-64;128;256}
J=${JOBS:-$(nproc)}
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }

# build SRC DIR: the library, then the timing tool against it.
build() {
  local src=$1 dir=$2
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHCORE_BUILD_TESTS=OFF \
    -DFLASHCORE_BUILD_BENCH=OFF -DFLASHCORE_CUDA=ON -DFLASHCORE_CUDA_ARCHS=90 \
    "-DFLASHCORE_CUDA_DTYPES=$AB_DTYPES" "-DFLASHCORE_CUDA_HDIMS=$AB_HDIMS" > "$dir.configure.log" 2>&1 || return 1
  ninja -C "$dir" -j"$(( J / 2 + 1 ))" flashcore_static > "$dir.build.log" 2>&1 || return 1
  g++ -O2 -std=c++20 -I"$src/src" -I"$src/include" -I"$CUDA_HOME/include" "$src/tests/cuda/cuda_timing.cpp" \
    "$dir/src/libflashcore.a" -L"$CUDA_HOME/lib64" -lcudart -fopenmp -ldl -lpthread -o "$dir/flashcore_cuda_timing" \
    >> "$dir.build.log" 2>&1
}

if has build; then
  stamp "build old ($old_src) and new ($new_src), side by side"
  mkdir -p build
  build "$old_src" build/ab_old & p_old=$!
  build "$new_src" build/ab_new & p_new=$!
  wait $p_old; r_old=$?
  wait $p_new; r_new=$?
  for t in old new; do
    r=$([ $t = old ] && echo $r_old || echo $r_new)
    echo "build $t rc=$r"
    [ "$r" = 0 ] || { tail -30 build/ab_$t.configure.log build/ab_$t.build.log; exit 1; }
    grep -i "warning" build/ab_$t.build.log | sort | uniq -c | head -10
  done
  cp build/ab_old.build.log build/ab_new.build.log "$OUT"/ 2>/dev/null
fi

if has time; then
  for t in old new; do [ -x build/ab_$t/flashcore_cuda_timing ] || { echo "no build/ab_$t/flashcore_cuda_timing (STAGES=build first)"; exit 1; }; done
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv | tee "$OUT/device.txt"
  # One sweep: the 16-bit grid, then the e4m3 rows (their own call: no hd64 e4m3 kernel).
  sweep() {
    local t=$1 r=$2 bin=build/ab_$1/flashcore_cuda_timing
    "$bin" --dtype f16 --dtype bf16 --hdims 64,128,256 --seqs "$SEQS" --iters "$ITERS" 2>> "$OUT/$t.err" |
      sed "s/^{/{\"side\":\"$t\",\"round\":$r,/" >> "$OUT/rows.jsonl"
    "$bin" --dtype e4m3 --hdims 128,256 --seqs "$SEQS" --iters "$ITERS" 2>> "$OUT/$t.err" |
      sed "s/^{/{\"side\":\"$t\",\"round\":$r,/" >> "$OUT/rows.jsonl"
  }
  rm -f "$OUT/rows.jsonl"
  for ((r = 0; r < ROUNDS; ++r)); do
    if (( r % 2 == 0 )); then order="old new"; else order="new old"; fi
    for t in $order; do
      stamp "round $r: $t"
      sweep "$t" "$r"
    done
  done
  stamp "done timing"
  python3 tests/cuda/ab_table.py "$OUT/rows.jsonl" | tee "$OUT/ab.txt"
fi
stamp end
