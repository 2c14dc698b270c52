#!/usr/bin/env bash
# Source trees built alike and timed against each other on a Hopper GPU (the device machine:
# nvcc, CMake, ninja, python3; no GTest, no network), for a change that must not slow the
# forward down, or to find which commit of a range did:
#   tests/cuda/ab_trees.sh NAME=DIR [NAME=DIR ...]     (in the repository root)
# Each DIR is a plain copy of a tree's sources (this tree: "."), e.g. made here and carried:
#   mkdir -p .device/t_old && git archive 94678b3 | tar -x -C .device/t_old   (.device/ is ignored)
# The first tree is the base of the table. Every tree is configured alike (Release,
# FLASHCORE_CUDA_ARCHS=90: the sm80 family for sm_90 and the sm90 family, AB_DTYPES
# (default f16;bf16;e4m3), AB_HDIMS (default 64;128;256), no tests, no bench) into
# build/ab_NAME, built side by side (the library, then each tree's own
# tests/cuda/cuda_timing.cpp linked to it by hand: the device image has no GTest), and timed by
# flashcore_cuda_timing (the dispatcher's kernel, CUDA events, median of ITERS calls) in
# rounds, the trees' order rotating by one each round: the 16-bit grid (f16 and, where
# configured, bf16; D 64 / 128 / 256, S in SEQS, B = 16384 / S, H = 2048 / D, causal or
# not) and the e4m3 rows (D 128 / 256, the same S and masks). Rounds run until ROUNDS are
# done or, with DEADLINE (seconds since the start), until one ends past it. Then
# tests/cuda/ab_table.py prints, for the base against every other tree, per row the
# kernel, the medians over the rounds, the speed ratio and its range over the rounds, the
# geometric mean and the rows below 0.98x. Logs and the JSON rows go to $OUT (default
# /tmp/ab_out). STAGES (default "build time"): a build finished by an earlier call on a
# warm machine is reused (ninja does nothing).
# Round-to-round spread on an H200 (2026-12-02): +-2-5 % per row at S <= 1024 with ITERS
# 100; medians of 4-8 rounds put the rows' ratios within ~1 %.
set -u
[ $# -ge 2 ] || { echo "usage: $0 NAME=DIR NAME=DIR [...]" >&2; exit 2; }
OUT=${OUT:-/tmp/ab_out}
mkdir -p "$OUT"
STAGES=${STAGES:-build time}
ROUNDS=${ROUNDS:-3}
DEADLINE=${DEADLINE:-0}
ITERS=${ITERS:-100}
SEQS=${SEQS:-512,1024,2048,4096,8192,16384}
AB_DTYPES=${AB_DTYPES:-f16;bf16;e4m3}
AB_HDIMS=${AB_HDIMS:-64;128;256}
J=${JOBS:-$(nproc)}
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }
stamp() { echo "[$(elapsed)s] $*"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
names=() dirs=()
for a in "$@"; do
  [[ $a == *=* ]] && [ -d "${a#*=}" ] || { echo "ab_trees: '$a' is not NAME=DIR with DIR a directory" >&2; exit 2; }
  names+=("${a%%=*}") dirs+=("$(cd "${a#*=}" && pwd)")
done
n=${#names[@]}

# build SRC DIR: the library, then the timing tool against it.
build() {
  local src=$1 dir=$2
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHCORE_BUILD_TESTS=OFF \
    -DFLASHCORE_BUILD_BENCH=OFF -DFLASHCORE_CUDA=ON -DFLASHCORE_CUDA_ARCHS=90 \
    "-DFLASHCORE_CUDA_DTYPES=$AB_DTYPES" "-DFLASHCORE_CUDA_HDIMS=$AB_HDIMS" > "$dir.configure.log" 2>&1 || return 1
  ninja -C "$dir" -j"$(( J / n + 1 ))" flashcore_static > "$dir.build.log" 2>&1 || return 1
  g++ -O2 -std=c++20 -I"$src/src" -I"$src/include" -I"$CUDA_HOME/include" "$src/tests/cuda/cuda_timing.cpp" \
    "$dir/src/libflashcore.a" -L"$CUDA_HOME/lib64" -lcudart -fopenmp -ldl -lpthread -o "$dir/flashcore_cuda_timing" \
    >> "$dir.build.log" 2>&1
}

if has build; then
  stamp "build ${names[*]}, side by side"
  mkdir -p build
  pids=()
  for ((i = 0; i < n; ++i)); do build "${dirs[i]}" "build/ab_${names[i]}" & pids+=($!); done
  for ((i = 0; i < n; ++i)); do
    wait "${pids[i]}"; r=$?
    echo "build ${names[i]} (${dirs[i]}) rc=$r"
    [ "$r" = 0 ] || { tail -30 "build/ab_${names[i]}.configure.log" "build/ab_${names[i]}.build.log"; exit 1; }
    grep -i "warning" "build/ab_${names[i]}.build.log" | sort | uniq -c | head -10
  done
fi

if has time; then
  for t in "${names[@]}"; do
    [ -x "build/ab_$t/flashcore_cuda_timing" ] || { echo "no build/ab_$t/flashcore_cuda_timing (STAGES=build first)"; exit 1; }
  done
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv | tee "$OUT/device.txt"
  bf16=""; [[ ";$AB_DTYPES;" == *";bf16;"* ]] && bf16="--dtype bf16"
  hd16=$(echo "$AB_HDIMS" | tr ';' ','); hd8=$(echo "$AB_HDIMS" | tr ';' '\n' | grep -vx 64 | paste -sd,)
  # One sweep of tree t in round r. The tool writes its own "round" key last; the rows are
  # tagged with side and round first, which ab_table.py reads.
  sweep() {
    local t=$1 r=$2 bin=build/ab_$1/flashcore_cuda_timing
    # shellcheck disable=SC2086
    "$bin" --dtype f16 $bf16 --hdims "$hd16" --seqs "$SEQS" --iters "$ITERS" 2>> "$OUT/$t.err" |
      sed "s/^{/{\"side\":\"$t\",\"round\":$r,/" >> "$OUT/rows.jsonl"
    if [[ ";$AB_DTYPES;" == *";e4m3;"* ]] && [ -n "$hd8" ]; then  # (no hd64 e4m3 kernel)
      "$bin" --dtype e4m3 --hdims "$hd8" --seqs "$SEQS" --iters "$ITERS" 2>> "$OUT/$t.err" |
        sed "s/^{/{\"side\":\"$t\",\"round\":$r,/" >> "$OUT/rows.jsonl"
    fi
  }
  rm -f "$OUT/rows.jsonl"
  for ((r = 0; ; ++r)); do
    if (( DEADLINE > 0 )); then (( r == 0 || $(elapsed) < DEADLINE )) || break; else (( r < ROUNDS )) || break; fi
    for ((i = 0; i < n; ++i)); do sweep "${names[(i + r) % n]}" "$r"; done
    stamp "round $r done"
  done
  pairs=(); for ((i = 1; i < n; ++i)); do pairs+=("${names[0]}/${names[i]}"); done
  python3 tests/cuda/ab_table.py "$OUT/rows.jsonl" "${pairs[@]}" | tee "$OUT/ab.txt"
fi
stamp end
