// The forward attention's test cases and their host data, shared by the CPU attention and
// score-variant tests: a case (shape, mask, layout, scale, score variants, varlen), its inputs
// and the fp64 truth, and the checks every run gets.
#pragma once

#include <cstdint>
#include <vector>

#include "common/test_util.hpp"

namespace fctest {

struct AttnCase {
  const char* name;
  int64_t b, sq, sk, h, hkv, d, dv;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  bool bhsd = false;  // memory order [B, H, S, D] instead of [B, S, H, D]
  int64_t pad = 0;    // extra elements after every row of D
  float scale = 0.0f;
  // Added to every element of key row j: ramp * j / sk. Rows whose query sums are
  // positive then see scores that climb tile after tile (the online strategy's rescales).
  double ramp = 0.0;
  // Score variants: softcap (0 = off), ALiBi slopes (0 none, 1 [H], 2 [B, H]: per sequence
  // with varlen), sinks [H]; random values drawn by the fixture.
  float softcap = 0.0f;
  int alibi = 0;
  bool sinks = false;
  // varlen: b = 1, sq / sk the packed rows (all covered by the sequences); prefix sums
  std::vector<int32_t> cu_q = {}, cu_k = {};
};

// c with score variants (and varlen sequences).
AttnCase with_variants(AttnCase c, float softcap, int alibi, bool sinks, std::vector<int32_t> cu_q = {},
                       std::vector<int32_t> cu_k = {});

// Inputs and the fp64 truth (computed once per case and dtype, shared by the runs).
struct AttnFixture {
  AttnCase c;
  DType dtype;
  HostTensor q, k, v, slopes, sinks, ref_out, ref_lse;

  // ref_threads: the reference's threads (0: all cores; 1 for the many tiny calls of a loop,
  // where waking a thread team costs more than the work).
  AttnFixture(const AttnCase& cs, DType dt, Rng& rng, int ref_threads = 0);

  // The case's parameters (mask, scale, variants pointing at this fixture's arrays, varlen).
  flashcore::AttentionParams params() const;

  // One run: fresh poisoned outputs, then every property the run must have: out and lse
  // within the tolerance of the kernel's operand dtype, nothing written outside the views,
  // the kernel and strategy asked for, and rows that see no key exactly O = 0 with lse = the
  // sink (-inf without sinks).
  void check(Strategy s, Exp2Mode e, int threads, const char* impl = nullptr, DType kernel_ab = DType::f32);

  // Whether query row i sees no key under the case's mask (varlen cases: never asked).
  bool masked(int64_t i) const;
};

}  // namespace fctest
