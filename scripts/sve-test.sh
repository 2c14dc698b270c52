#!/usr/bin/env bash
# Cross-builds flashcore for aarch64 (cmake/toolchain-aarch64.cmake) and runs the CPU tests
# under qemu-aarch64 at 128-, 256- and 512-bit SVE vectors (.ci/run calls this through
# scripts/test.sh). Emulation runs at ~0.2 GFLOP/s, so the suites are split to fit ~10 min
# on 2 cores:
#   every length:  each SVE kernel's GoogleTest (gemm + vec ops) and each SVE kernel forced
#                  through attention / softmax_v / gemm_chain against the fp64 reference
#                  (every strategy and exp2 mode), the list/dispatch consistency checks;
#   128 bits once: the op suites on the automatic choice (softmax_v, gemm_chain, exp2,
#                  backward, edge cases), the argument-error suites and the C ABI test.
#                  At 128 bits because qemu's speed at the longer vectors depends on the
#                  host: on a Sapphire Rapids-class VM (2026-11-30) the forced f32_12x2_sve
#                  attention test took 2.0 / 18.9 / 20.6 s at 128 / 256 / 512 bits and the
#                  backward determinism test 45 s at 128 against more than 300 s at 512;
#                  this run was on course for ~40 minutes at 512 bits (137 of 417 tests in
#                  12.5 minutes). Every SVE kernel still runs at every length above.
# Left out under emulation: Cpu/AttentionTest.MatchesReference (O(minutes) per case in
# qemu; the attention path of every SVE kernel is covered by the forced-kernel tests), the
# portable kernels' forced-kernel tests (run natively by the release stage), and the two
# longest backward tests, which the release and sanitizer stages run natively: the
# determinism test (the reduction order across thread counts is the pipeline's, not the
# kernels'; 92 s in qemu) and the 1000-row causal cases (66 s for three dtypes; the other
# backward cases take the same SVE kernels over several tiles). Times: AMD EPYC VM (AVX-512),
# 2026-12-02, where the 128-bit pass of the op suites took 298 s before these were left out.
# Env: FC_JOBS (default nproc), FC_SVE_BITS (default "128 256 512"), FC_SVE_BUILD.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/sve-deps.sh
jobs=${FC_JOBS:-$(nproc)}
build=${FC_SVE_BUILD:-build/sve}
t0=$SECONDS

cmake -S . -B "$build" -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake \
      -DCMAKE_BUILD_TYPE=Release -DFLASHCORE_BUILD_BENCH=OFF -DFLASHCORE_BUILD_PYTHON=OFF >/dev/null
ninja -C "$build" -j"$jobs"
echo "sve: built in $((SECONDS - t0)) s"

per_length='_sve$|vecops_sve|GemmUkernelList|VecOpsList'
once_excl='_sve$|vecops_sve|GemmUkernelList|VecOpsList|AttentionTest\.MatchesReference|_generic$'
once_excl+='|Backward\.DeterministicAcrossRunsAndThreadCounts|causal_square_1000_'
failed=()
run_at() {  # run_at BITS CTEST-ARGS...: every length runs even when an earlier one failed
  local bits=$1; shift
  cmake -DFLASHCORE_QEMU_SVE_BITS="$bits" "$build" >/dev/null   # changes only the test commands
  local t=$SECONDS
  ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600 "$@" ||
    failed+=("${bits}-bit")
  # Guard against stale test lists: the discovered tests must run at this length.
  grep -q "sve${bits}=on" "$build"/tests/flashcore_ukernel_tests*_tests.cmake ||
    { echo "sve: tests did not run at ${bits} bits"; failed+=("${bits}-bit (stale)"); }
  echo "sve: ${bits}-bit tests in $((SECONDS - t)) s"
}
for bits in ${FC_SVE_BITS:-128 256 512}; do
  run_at "$bits" -R "$per_length"
done
run_at 128 -E "$once_excl"
echo "sve: all done in $((SECONDS - t0)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "sve: FAILED at ${failed[*]}"
  exit 1
fi
