// Inputs of each op (host arrays, random values, fresh seed) and the check of an output
// against flashcore::reference on an affordable subset. Shared by the CPU and CUDA paths.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench.hpp"
#include "flashcore/flashcore.hpp"

namespace fcbench {

using Rng = std::mt19937_64;

flashcore::DType parse_dtype(const std::string& s);
flashcore::Strategy parse_strategy(const std::string& s);

// n elements of one dtype in host memory.
struct HostArray {
  flashcore::DType dtype = flashcore::DType::f32;
  int64_t n = 0;
  std::vector<unsigned char> bytes;
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  size_t nbytes() const { return bytes.size(); }
  float at(int64_t i) const;  // element i as fp32 (e4m3 decoded)
};

// Uniform values in [lo, hi), rounded to the dtype; e4m3 draws random finite codes of
// magnitude 2^-3 .. 2^2 instead (never zeros, never NaN).
HostArray random_array(flashcore::DType t, int64_t n, float lo, float hi, Rng& rng);
HostArray empty_array(flashcore::DType t, int64_t n);
void poison(HostArray& a);  // every element NaN: a kernel that skips one cannot pass

// Contiguous row-major view of a host array.
flashcore::Tensor view(HostArray& a, std::initializer_list<int64_t> shape,
                       flashcore::Device dev = flashcore::Device::cpu, void* data = nullptr);

struct AttentionData {
  int64_t b = 0, h = 0, hkv = 0, sq = 0, sk = 0, d = 0;
  HostArray q, k, v, o;  // Q [B,Sq,H,D], K/V [B,Sk,Hkv,D], O [B,Sq,H,D]
  HostArray slopes, sinks;  // f32 [H] with --alibi / --sinks (else empty)
  flashcore::Tensor slopes_t, sinks_t;  // their views (set by set_variants)
};
// decode's KV cache holding the Sk keys of d's K and V for every sequence (cache_seqlens =
// Sk): contiguous (page 0: kc / vc stay empty, d.k / d.v are the cache), or pages of `page`
// rows, each sequence's pages in a random order (a server's cache after many sequences came
// and went; in table order with in_order); table [B, per_seq] lists them.
struct DecodeCache {
  int64_t page = 0, per_seq = 0, pages = 0;
  bool in_order = false;
  HostArray kc, vc, lens, table;
  // The rows' note: "paged cache, page P, pages in ... order" or "contiguous cache".
  std::string describe() const;
};
// fp8: the cache in e4m3 (d's K and V converted; a contiguous one then a copy, pages = B).
DecodeCache make_decode_cache(const AttentionData& d, int64_t page, bool in_order, Rng& rng, bool fp8 = false);
// Every element rounded to e4m3 and back (saturating; NaN kept), in the array's own dtype.
void round_to_e4m3(HostArray& a);
struct SoftmaxVData {
  int64_t m = 0, l = 0, d = 0;
  HostArray s, v, o;     // S [M,L] f32, V [L,d], O [M,d]
};
struct GemmChainData {
  int64_t m = 0, k1 = 0, k2 = 0, n = 0;
  HostArray a, b, c, e;  // A [M,K1], B [K1,K2], C [K2,N], E [M,N]
};
AttentionData make_attention(const Config& c, Rng& rng);
// The score variants of c (--softcap, --alibi, --sinks) into p, the arrays' views pointing at
// d's host arrays, or at the device copies slopes_dev / sinks_dev on `dev`.
void set_variants(const Config& c, AttentionData& d, flashcore::AttentionParams& p,
                  flashcore::Device dev = flashcore::Device::cpu, void* slopes_dev = nullptr,
                  void* sinks_dev = nullptr);
SoftmaxVData make_softmax_v(const Config& c, Rng& rng);
GemmChainData make_gemm_chain(const Config& c, Rng& rng);

struct CheckResult {
  double rel_err = NAN;
  std::string subset;  // empty when the whole output was checked
};
// Compare the output held in the data's output array with the fp64 reference (run on
// fp32 copies of the inputs, so the reference itself is not rounded to fp16/bf16).
// `out` is the output to check ([B,Sq,H,D], usually d.o). max_heads / max_rows > 0 limit
// the check to the first max_heads query heads (of batch 0) and the last max_rows rows
// (for outputs computed only in part).
CheckResult check_attention(const Config& c, const AttentionData& d, const HostArray& out,
                            int64_t max_heads = 0, int64_t max_rows = 0);
CheckResult check_softmax_v(const SoftmaxVData& d);

// attention's backward: dout (random), the forward's lse, and the gradients.
struct BackwardData {
  HostArray dout, lse, dq, dk, dv;
};
BackwardData make_backward(const AttentionData& d, Rng& rng);
// The gradients against the fp64 backward reference: rel_err is the largest of dq's, dk's
// and dv's. Within the reference budget the whole problem; beyond it dq alone, on the last
// rows of the first query heads of batch 0 (they see the same keys as in the whole problem).
CheckResult check_attention_backward(const Config& c, const AttentionData& d, const BackwardData& g);
CheckResult check_gemm_chain(const GemmChainData& d);

}  // namespace fcbench
