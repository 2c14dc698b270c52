// What the forward's GPU test files (attention_cuda_*_test.cpp, one binary:
// flashcore_cuda_tests) share: a fixed-length case (Case) run on the GPU against the fp64
// reference (run_case), the variable-length one (varlen_case), the tolerances, the sm90 keys
// of this build, and the check that bad inputs are refused before any launch
// (expect_refused). Bodies of the larger helpers in attention_cuda_test_util.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/test_util.hpp"
#include "cuda_test_util.hpp"
#include "flashcore/flashcore.hpp"

namespace fctest::cuda_fwd {

struct Case {
  DType dtype = DType::f16;
  int64_t B = 1, H = 2, Hkv = 2, Sq = 64, Sk = 64, D = 64, Dv = -1;
  bool causal = false;
  int64_t wl = -1, wr = -1;
  bool lse = true;
  bool bhsd = false;   // memory order [B, H, S, D] instead of [B, S, H, D]
  int64_t pad = 0;     // extra elements after every row
  int64_t out_pad = -1;  // the output's, when >= 0 (else pad)
  bool exact_fp32 = false;
  int tile_m = 0, tile_n = 0;
  std::string impl;  // force a kernel by key
  float scale = 0.f;  // 0 = 1/sqrt(D)
  std::string expect_kernel;  // when set: the kernel that ran must start with this
  bool exact_kernel = false;  // ... and be exactly this
  bool expect_hpad = false;   // the kernel name must say "+hpad" (head dims padded by copies)
  bool expect_hcols = false;  // ... "+hcols" (off the multiples of 8 in place on sm90)
  // Checks only the first and last KV head's query heads against the reference: the fp64
  // reference of every head of DispatcherSelects' 132-head cases (their subject is the
  // kernel choice) made it run 165-176 s per dtype on an H200, 79-88 s with this.
  bool sample_heads = false;
  std::string str() const {
    return std::string(fctest::name(dtype)) + " B" + std::to_string(B) + " H" + std::to_string(H) + "/" +
           std::to_string(Hkv) + " Sq" + std::to_string(Sq) + " Sk" + std::to_string(Sk) + " D" +
           std::to_string(D) + " Dv" + std::to_string(Dv < 0 ? D : Dv) + (causal ? " causal" : "") +
           " w(" + std::to_string(wl) + "," + std::to_string(wr) + ")" + (bhsd ? " bhsd" : "") +
           (tile_m ? " tile " + std::to_string(tile_m) + "x" + std::to_string(tile_n) : "") + " " + impl;
  }
};

inline constexpr const char* kSimtKey = "fwd_sm80_f32_hd256_simt";

inline constexpr double kFp8Tol = 6e-2;  // e4m3 inputs: why, at run_fp8 (attention_cuda_fp8_test.cpp)

// fp32 storage runs on TF32 tensor cores (10-bit mantissa operands, fp32 accumulation)
// unless exact_fp32: BENCH.md's TF32 tolerance 2e-3; exact FFMA at the fp32 1e-5.
inline double out_tol(DType d, int64_t sk, bool exact_fp32 = false) {
  if (d == DType::e4m3) return kFp8Tol;
  if (d == DType::f32 && !exact_fp32) return 2e-3;
  return fctest::tolerance(d, flashcore::Exp2Mode::exact, sk);
}
inline double lse_tol(DType d, bool exact_fp32 = false) { return d == DType::f32 && exact_fp32 ? 1e-4 : 3e-3; }

// One fixed-length case on the GPU (NaN-poisoned output, padding checked) against the fp64
// reference, and which kernel ran.
void run_case(const Case& c);

// Variable-length batch (one empty q sequence, GQA, lse) against the reference; `impl`
// forces a kernel by key and `expect` is the kernel name that must run (default: impl;
// e.g. "+gqa4" appended where the sm90 kernels pack the query heads; with no impl, the
// dispatcher's choice); cq / ck: other
// sequence lengths; extra_q: rows of Q and O past the last sequence, which stay untouched;
// graph: with params.max_seqlen_q/k (k's loose), captured in a CUDA graph on a stream of
// its own and replayed (no host copy of cu_seqlens: capture fails on a synchronization).
extern const std::vector<int32_t> kVarlenQ, kVarlenK;  // one empty q sequence
void varlen_case(DType dt, int64_t D, const std::string& impl, int64_t H = 4, const std::vector<int32_t>& cq = kVarlenQ,
                 const std::vector<int32_t>& ck = kVarlenK, const std::string& expect = "", int64_t extra_q = 0,
                 bool graph = false);

// The sm90 keys of this build for a dtype with their head dims (table order: the first
// of a head dim is the dispatcher's choice), or for one head dim; not the score variants'
// "_sv" rows (attention_cuda_variants_test.cpp forces those).
inline std::vector<std::pair<std::string, int64_t>> sm90_keys(DType dt, int64_t hd = 0) {
  auto ks = keys_by_prefix("fwd_sm90_" + std::string(fctest::name(dt)) + "_hd", false, hd);
  std::erase_if(ks, [](const auto& k) { return has_suffix(k.first, "_sv"); });
  return ks;
}
inline std::string sm90_key(DType dt, int64_t hd) {
  const auto ks = sm90_keys(dt, hd);
  return ks.empty() ? std::string() : ks.front().first;
}

// Bad inputs: a flashcore::Error naming the argument, and the output left untouched.
void expect_refused(const flashcore::Tensor& q, const flashcore::Tensor& k, const flashcore::Tensor& v,
                    DevTensor& out, const HostTensor& host_out, const flashcore::AttentionParams& p,
                    flashcore::Status code, const std::string& names);

}  // namespace fctest::cuda_fwd
