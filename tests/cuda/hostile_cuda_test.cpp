// The CUDA forward kernels on hostile values, every kernel of this build forced by key
// (params.impl; KV splits by "+kv<N>", fp8's V^T by the kernel's own transposer and by the
// pre-pass), against the fp64 reference under the library's rules (flashcore.hpp; the
// CPU's tests/cpu/hostile_test.cpp checks the same): where the reference is finite ours is
// finite and close, where it is not ours is not either; lse NaN for a row that sees a NaN
// score, -inf (and O = 0) for a row with no finite score.
//
//   HiddenNonFiniteV  NaN / Inf in V (and NaN in K for one KV head) at keys the causal mask,
//                     a window or a varlen sequence's end hides from some rows of a tile
//                     (the diagonal tile, window edges, the next sequence's first keys):
//                     they must not reach those rows, and must reach the rows that see them.
//   HugeScores        q, k of 0 or +-2^e (scores exact in fp32, scaled past 2^31, any
//                     sign of the scale), and wide uniform values (+-3e4 in f16): the
//                     softmax of large finite scores, lse relative.
//   NanQueryRows      a NaN in some query rows: their O and lse NaN, the others untouched.
//   NoFiniteScore     rows that see no key (causal with Sq > Sk, empty varlen sequences)
//                     and rows whose only keys score -inf: O = 0, lse = -inf.
//   RandomNonFinite   NaN / +-Inf planted at random in q, k and v.
//   Variants          the cases above with softcap, ALiBi slopes and sinks (the sm80
//                     family's variant kernels, the exact fp32 kernel's variant form and
//                     the sm90 "_sv" kernels).
//
// Skipped with a message without an sm80+ GPU, and per kernel where the device cannot run it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "common/test_util.hpp"
#include "cuda_test_util.hpp"
#include "flashcore/flashcore.hpp"

namespace fctest {
namespace {

namespace fc = flashcore;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr const char* kSimtKey = "fwd_sm80_f32_hd256_simt";

// A kernel of this build, by key, and what the key says of it.
struct Kernel {
  std::string key;
  DType dt = DType::f16;  // the tensors' dtype (tf32 keys: f32)
  int64_t d = 0;
  bool sm90 = false, fp8 = false, persistent = false, vt_in = false, simt = false;
  bool sv = false;  // sm90 "_sv": the score variants' kernel (plain calls run on it too)
  bool splits() const { return sm90 && !persistent; }  // takes "+kv<N>"
};

Kernel parse(const std::string& key) {
  Kernel k;
  k.key = key;
  if (key == kSimtKey) {
    k.dt = DType::f32;
    k.d = 128;  // any D <= 256; 128 keeps the reference quick
    k.simt = true;
    return k;
  }
  k.sm90 = key.rfind("fwd_sm90_", 0) == 0;
  const size_t a = 9, u = key.find('_', a);  // "fwd_sm80_" / "fwd_sm90_": 9 characters
  const std::string dt = key.substr(a, u - a);
  k.dt = dt == "f16" ? DType::f16 : dt == "bf16" ? DType::bf16 : dt == "e4m3" ? DType::e4m3 : DType::f32;
  k.fp8 = k.dt == DType::e4m3;
  k.d = std::stoll(key.substr(u + 3));  // "_hd<D>"
  k.persistent = has_suffix(key, "_p") || has_suffix(key, "_p_sv");
  k.vt_in = has_suffix(key, "_vt");
  k.sv = has_suffix(key, "_sv");
  return k;
}

// Every forward kernel key of this build (listed without a GPU too: the test names).
std::vector<std::string> forward_keys() {
  std::vector<fc::KernelInfo> ks(256);
  ks.resize(size_t(fc::list_kernels(ks.data(), int(ks.size()))));
  std::vector<std::string> out;
  for (const auto& k : ks)
    if (k.key.rfind("fwd_sm80_", 0) == 0 || k.key.rfind("fwd_sm90_", 0) == 0) out.push_back(k.key);
  return out;
}

bool available(const std::string& key) {
  std::vector<fc::KernelInfo> ks(256);
  ks.resize(size_t(fc::list_kernels(ks.data(), int(ks.size()))));
  for (const auto& k : ks)
    if (k.key == key) return k.available;
  return false;
}

enum class Fill { hidden, huge_pow2, huge_wide, nan_q, minus_inf, random };

// One call: shapes (varlen: cu_q / cu_k, B = 1, Sq / Sk the packed totals; rows past the
// last sequence are left out), mask, scale, a "+kv<N>" suffix, fp8's V^T pre-pass.
struct Call {
  int64_t B = 1, H = 4, Hkv = 2, Sq = 64, Sk = 64;
  bool causal = false;
  int64_t wl = -1, wr = -1;
  std::vector<int32_t> cu_q, cu_k;
  float scale = 0.f;  // 0: 1 / sqrt(D)
  std::string suffix;
  bool prepass = false;
  float softcap = 0.f;                  // score variants: softcap (0: off),
  bool alibi = false, sinks = false;    // ALiBi slopes [H] and sinks [H] (random)
  int64_t d = 0;                        // the head dim (0: the kernel's)
  int64_t head_dim(const Kernel& kn) const { return d > 0 ? d : kn.d; }
  std::string str() const {
    std::string s = "B" + std::to_string(B) + " H" + std::to_string(H) + "/" + std::to_string(Hkv) + " Sq" +
                    std::to_string(Sq) + " Sk" + std::to_string(Sk) + (causal ? " causal" : "") + " w(" +
                    std::to_string(wl) + "," + std::to_string(wr) + ")" + (cu_q.empty() ? "" : " varlen") +
                    " scale " + std::to_string(scale) + " " + suffix + (prepass ? " V^T pre-pass" : "") +
                    (softcap > 0.f ? " softcap " + std::to_string(softcap) : "") + (alibi ? " alibi" : "") +
                    (sinks ? " sinks" : "") + (d > 0 ? " D" + std::to_string(d) : "");
    return s;
  }
};

// Sequence i's first query and key row and lengths (one sequence without varlen).
struct Seq {
  int64_t q0, k0, sq, sk;
};
std::vector<Seq> sequences(const Call& c) {
  if (c.cu_q.empty()) return {{0, 0, c.Sq, c.Sk}};
  std::vector<Seq> s;
  for (size_t i = 0; i + 1 < c.cu_q.size(); ++i)
    s.push_back({c.cu_q[i], c.cu_k[i], c.cu_q[i + 1] - c.cu_q[i], c.cu_k[i + 1] - c.cu_k[i]});
  return s;
}

// x at element (b, s, h, e) of a [B, S, H, E] tensor.
void put(HostTensor& t, int64_t b, int64_t s, int64_t h, int64_t e, double x) {
  const auto& sh = t.shape();
  t.set(((b * sh[1] + s) * sh[2] + h) * sh[3] + e, x);
}

// Inputs per fill (tensors [B, S, H, D]); fp8 cannot hold Inf (NaN there), and its huge
// scores come from the descales (descale).
void fill(const Kernel& kn, const Call& c, Fill f, HostTensor& q, HostTensor& k, HostTensor& v, Rng& rng,
          float* descale) {
  const double inf = kn.fp8 ? kNaN : kInf;
  q.fill_uniform(rng, -1, 1);
  k.fill_uniform(rng, -1, 1);
  v.fill_uniform(rng, -1, 1);
  const int64_t D = c.head_dim(kn);
  switch (f) {
    case Fill::hidden: {  // keys hidden from some rows of their tile, per sequence
      // Key number x of the list poisons V's columns e = x (mod kKeys) (NaN, +Inf, -Inf in
      // turn): a row is non-finite only in the columns of the keys it sees, so a hidden
      // key's value that reached it shows. KV head 1 has a NaN in K too (not at key 0, which
      // every causal row sees): a NaN row where the key is seen, nothing where it is not.
      constexpr int64_t kKeys = 6;
      for (const Seq& s : sequences(c)) {
        const int64_t off = s.sk - s.sq;
        const int64_t keys[kKeys] = {off + s.sq / 2 + 1, off + s.sq - 1, off - 3, 0, 400, s.sk - 1};
        for (int64_t x = 0; x < kKeys; ++x) {
          const int64_t j = keys[x];
          if (j < 0 || j >= s.sk) continue;
          for (int64_t b = 0; b < c.B; ++b)
            for (int64_t hk = 0; hk < c.Hkv; ++hk) {
              for (int64_t e = x; e < D; e += kKeys) put(v, b, s.k0 + j, hk, e, e % 3 == 0 ? kNaN : e % 3 == 1 ? inf : -inf);
              if (hk == 1 && j != 0) put(k, b, s.k0 + j, hk, x, kNaN);
            }
        }
      }
      break;
    }
    case Fill::huge_pow2: {  // q, k of 0 or +-big: exact fp32 scores, their scaled max past
      // 2^20 (kExactFrom; at 2^40, past 2^31). With ALiBi, 2^14 for every dtype: the
      // kernels keep the ALiBi term beside a huge score (differences exact near the max),
      // which the fp64 reference itself rounds away beside scores of 2^80 (2^40 squared).
      const double big = kn.fp8 ? 0x1p8 : (kn.dt == DType::f16 || c.alibi) ? 0x1p14 : 0x1p40;
      for (HostTensor* t : {&q, &k})
        for (int64_t i = 0; i < t->numel(); ++i) {
          const int64_t r = rng.integer(0, 2);
          t->set(i, r == 0 ? 0.0 : r == 1 ? big : -big);
        }
      *descale = kn.fp8 ? 0x1p12f : 1.f;
      break;
    }
    case Fill::huge_wide: {  // wide uniform values (one dominant key per row)
      const double w = kn.fp8 ? 448 : 3e4;
      q.fill_uniform(rng, -w, w);
      k.fill_uniform(rng, -w, w);
      *descale = kn.fp8 ? 0x1p6f : 1.f;
      break;
    }
    case Fill::nan_q:  // a NaN in every seventh query row
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t s = 3; s < c.Sq; s += 7)
          for (int64_t h = 0; h < c.H; h += 2) put(q, b, s, h, s % D, kNaN);
      break;
    case Fill::minus_inf:  // q[.., 0] > 0, and K's first element -inf at every fifth key: scores -inf
      for (int64_t b = 0; b < c.B; ++b) {
        for (int64_t s = 0; s < c.Sq; ++s)
          for (int64_t h = 0; h < c.H; ++h) put(q, b, s, h, 0, 1.0);
        for (int64_t s = 2; s < c.Sk; s += 5)
          for (int64_t hk = 0; hk < c.Hkv; ++hk) put(k, b, s, hk, 0, -kInf);
      }
      break;
    case Fill::random:
      for (HostTensor* t : {&q, &k, &v}) {
        const int64_t n = t->numel(), planted = std::max<int64_t>(1, n / 400);
        for (int64_t i = 0; i < planted; ++i) {
          const int64_t r = rng.integer(0, 2);
          t->set(rng.integer(0, n - 1), r == 0 ? kNaN : r == 1 ? inf : -inf);
        }
      }
      break;
  }
}

// Output and lse tolerances of a kernel (attention_cuda_test.cpp's: e4m3 6e-2, TF32 2e-3,
// the FFMA kernel fp32's, 16-bit BENCH.md's).
double out_tol(const Kernel& kn, int64_t sk) {
  if (kn.fp8) return 6e-2;
  if (kn.dt == DType::f32) return kn.simt ? 1e-5 : 2e-3;
  return tolerance(kn.dt, fc::Exp2Mode::exact, sk);
}
double lse_tol(const Kernel& kn) { return kn.simt ? 1e-4 : 3e-3; }

// fp8's lse beside lse_tol: the e4m3 kernels' scores come from FP8 wgmma, whose k-steps add
// their products with less than fp32's precision (of the order of 2^-13 of the largest,
// as the DeepSeek-V3 report measured it), so a score's error scales with its terms
// sum_d |q_d k_d|, not with the score: on wide values a row whose largest score cancels
// to a small one (terms 6.2e6, q.k -1077.7, 7 keys) came out with q.k = -1104.0 on
// fwd_sm90_e4m3_hd128_128x192_s3 (lse -399690.7 for -390164.5: 2^-17.8 of the terms).
// Row (b, h, i) may differ by 2^-12 |scale| max_j sum_d |q_d k_jd| more, over the keys j of
// its sequence (q, k: the reference's f32 copies, descales folded in).
::testing::AssertionResult fp8_lse_agree(const HostTensor& lse, const HostTensor& ref, double tol, const Call& c,
                                         const HostTensor& q, const HostTensor& k, int64_t D) {
  const double scale = c.scale != 0.f ? std::abs(double(c.scale)) : 1.0 / std::sqrt(double(D));
  const int64_t groups = c.H / c.Hkv;
  std::vector<double> qa(size_t(q.numel())), ka(size_t(k.numel()));
  for (int64_t x = 0; x < q.numel(); ++x) qa[size_t(x)] = std::abs(q.get(x));
  for (int64_t x = 0; x < k.numel(); ++x) ka[size_t(x)] = std::abs(k.get(x));
  for (const Seq& sq : sequences(c))
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t i = sq.q0; i < sq.q0 + sq.sq; ++i) {
          double terms = 0;
          for (int64_t j = sq.k0; j < sq.k0 + sq.sk; ++j) {
            const double* qr = &qa[size_t(((b * c.Sq + i) * c.H + h) * D)];
            const double* kr = &ka[size_t(((b * c.Sk + j) * c.Hkv + h / groups) * D)];
            double t = 0;
            for (int64_t e = 0; e < D; ++e) t += qr[e] * kr[e];
            terms = std::max(terms, t);
          }
          const int64_t x = (b * c.H + h) * c.Sq + i;
          const double o = lse.get(x), r = ref.get(x);
          const bool ok = std::isnan(r)   ? std::isnan(o)
                          : std::isinf(r) ? o == r
                                          : std::isfinite(o) && std::abs(o - r) <= tol * (1 + std::abs(r)) + 0x1p-12 * scale * terms;
          if (!ok)
            return ::testing::AssertionFailure() << "lse (row-major index " << x << "): got " << o << ", want " << r
                                                 << " (fp8 score terms up to " << scale * terms << ")";
        }
  return ::testing::AssertionSuccess();
}

// Sets (or clears) FLASHCORE_SM90_VT_PREPASS for its lifetime.
struct PrepassEnv {
  explicit PrepassEnv(bool on) : on_(on) {
    if (on_) setenv("FLASHCORE_SM90_VT_PREPASS", "1", 1);
  }
  ~PrepassEnv() {
    if (on_) unsetenv("FLASHCORE_SM90_VT_PREPASS");
  }
  bool on_;
};

void run(const Kernel& kn, const Call& c, Fill f) {
  SCOPED_TRACE(kn.key + ": " + c.str());
  Rng rng;
  FC_TRACE_SEED(rng);
  const int64_t D = c.head_dim(kn);
  const DType out_dt = kn.fp8 ? DType::f16 : kn.dt;
  HostTensor q(kn.dt, {c.B, c.Sq, c.H, D}), k(kn.dt, {c.B, c.Sk, c.Hkv, D}), v(kn.dt, {c.B, c.Sk, c.Hkv, D});
  HostTensor o(out_dt, {c.B, c.Sq, c.H, D}), lse(DType::f32, {c.B, c.H, c.Sq});
  float descale = 1.f;
  fill(kn, c, f, q, k, v, rng, &descale);
  o.poison();
  lse.poison();
  HostTensor slopes(DType::f32, {c.H}), sinks(DType::f32, {c.H});
  slopes.fill_uniform(rng, 0.01, 0.3);
  sinks.fill_uniform(rng, -1.5, 2.5);
  DevTensor dq(q), dk(k), dv(v), dout(o), dlse(lse), dslopes(slopes), dsinks(sinks);
  int32_t *dcq = nullptr, *dck = nullptr;
  const bool varlen = !c.cu_q.empty();
  if (varlen) {
    ASSERT_EQ(cudaMalloc(&dcq, c.cu_q.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dck, c.cu_k.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dcq, c.cu_q.data(), c.cu_q.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dck, c.cu_k.data(), c.cu_k.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
  fc::AttentionParams p;
  p.causal = c.causal;
  p.window_left = c.wl;
  p.window_right = c.wr;
  p.scale = c.scale;
  p.softcap = c.softcap;
  p.alibi_slopes = c.alibi ? &dslopes.view() : nullptr;
  p.sinks = c.sinks ? &dsinks.view() : nullptr;
  if (kn.fp8) p.q_descale = p.k_descale = descale;
  if (varlen) {
    p.cu_seqlens_q = dcq;
    p.cu_seqlens_k = dck;
    p.varlen_batch = int64_t(c.cu_q.size()) - 1;
  }
  const std::string impl = kn.key + c.suffix;
  p.impl = impl.c_str();
  p.lse = &dlse.view();
  fc::PhaseTimes times;
  {
    const PrepassEnv env(c.prepass);
    ASSERT_NO_THROW(fc::attention(dq.view(), dk.view(), dv.view(), dout.view(), p, &times));
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dout.download(o);
  dlse.download(lse);
  cudaFree(dcq);
  cudaFree(dck);
  EXPECT_EQ(times.kernel.rfind(kn.key, 0), 0u) << "kernel " << times.kernel;
  if (D % 8 != 0) {
    EXPECT_NE(times.kernel.find("+hcols"), std::string::npos) << "kernel " << times.kernel;
  }
  EXPECT_TRUE(o.padding_untouched()) << "kernel wrote outside the output view";

  HostTensor ref(DType::f32, {c.B, c.Sq, c.H, D}), ref_lse(DType::f32, {c.B, c.H, c.Sq});
  fc::AttentionParams rp = p;
  rp.impl = nullptr;
  rp.lse = &ref_lse.view();
  rp.alibi_slopes = c.alibi ? slopes.ptr() : nullptr;
  rp.sinks = c.sinks ? sinks.ptr() : nullptr;
  if (varlen) {
    rp.cu_seqlens_q = c.cu_q.data();
    rp.cu_seqlens_k = c.cu_k.data();
  }
  // The reference takes f32 inputs, for which it refuses descales other than 1: fp8's
  // descales go into its copies of q and k instead (powers of two: the products are exact
  // in f32, so the reference computes the scores the fp8 call was asked for).
  rp.q_descale = rp.k_descale = rp.v_descale = 1.f;
  HostTensor q32 = to_f32(q), k32 = to_f32(k), v32 = to_f32(v);
  if (kn.fp8) {
    for (int64_t i = 0; i < q32.numel(); ++i) q32.set(i, q32.get(i) * double(p.q_descale));
    for (int64_t i = 0; i < k32.numel(); ++i) k32.set(i, k32.get(i) * double(p.k_descale));
    for (int64_t i = 0; i < v32.numel(); ++i) v32.set(i, v32.get(i) * double(p.v_descale));
  }
  fc::reference::attention(q32.view(), k32.view(), v32.view(), ref.view(), rp);
  if (varlen)  // rows past the last sequence: not written, left out
    for (int64_t s = c.cu_q.back(); s < c.Sq; ++s)
      for (int64_t h = 0; h < c.H; ++h) {
        for (int64_t e = 0; e < D; ++e) {
          const int64_t i = (s * c.H + h) * D + e;
          EXPECT_TRUE(std::isnan(o.get(i))) << "row " << s << " past the last sequence was written";
          o.set(i, 0.0);
          ref.set(i, 0.0);
        }
        lse.set(h * c.Sq + s, -kInf);
        ref_lse.set(h * c.Sq + s, -kInf);
      }
  EXPECT_TRUE(outputs_agree(o, ref, out_tol(kn, c.Sk))) << "kernel " << times.kernel;
  if (kn.fp8)
    EXPECT_TRUE(fp8_lse_agree(lse, ref_lse, lse_tol(kn), c, q32, k32, D)) << "kernel " << times.kernel;
  else
    EXPECT_TRUE(lse_agree(lse, ref_lse, lse_tol(kn))) << "kernel " << times.kernel;
}

class CudaHostile : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    FC_REQUIRE_GPU();
    if (!available(GetParam())) GTEST_SKIP() << GetParam() << " does not run on this device";
    kn_ = parse(GetParam());
  }
  // Runs c, then (sm90 kernels without "_p") with KV splits, and (e4m3 kernels whose V^T
  // the kernel itself makes on fixed-length batches: "_p" at hd128) with the pre-pass.
  void run_all(Call c, Fill f, bool splits = true) {
    run(kn_, c, f);
    if (splits && kn_.splits() && !kn_.vt_in) {
      Call s = c;
      s.suffix = "+kv3";
      run(kn_, s, f);
    }
    if (kn_.fp8 && kn_.persistent && c.cu_q.empty()) {
      Call s = c;
      s.prepass = true;
      run(kn_, s, f);
    }
  }
  Call call(int64_t sq, int64_t sk, bool causal = false, int64_t wl = -1, int64_t wr = -1) const {
    Call c;
    c.Sq = sq;
    c.Sk = sk;
    c.causal = causal;
    c.wl = wl;
    c.wr = wr;
    return c;
  }
  Call varlen(std::vector<int32_t> cu_q, std::vector<int32_t> cu_k, bool causal) const {
    Call c;
    c.Sq = cu_q.back() + 3;  // rows past the last sequence
    c.Sk = cu_k.back();
    c.cu_q = std::move(cu_q);
    c.cu_k = std::move(cu_k);
    c.causal = causal;
    return c;
  }
  Kernel kn_;
};

// sm90 16-bit kernels on head dims off the multiples of 8, in place (the tensors' heads as
// the columns of their rows: a tile reads the next head's columns past D, which must add
// nothing; backend.cpp: attention_head_columns): hidden and planted NaN / Inf, which now
// sit in the columns the neighbouring head's tiles read too, and huge scores.
TEST_P(CudaHostile, HeadColumns) {
  if (!kn_.sm90 || kn_.fp8) GTEST_SKIP() << "heads in columns: the sm90 16-bit kernels";
  Call c = call(300, 333, true);
  c.H = c.Hkv = 8;
  c.d = kn_.d - 17;
  run_all(c, Fill::hidden, false);
  run_all(c, Fill::huge_pow2, false);
  Call g = call(200, 150, false, 40, 7);
  g.H = g.Hkv = 8;
  g.d = kn_.d - 18;
  run_all(g, Fill::random, false);
  Call v = varlen({0, 7, 7, 300}, {0, 100, 120, 500}, true);
  v.H = v.Hkv = 8;
  v.d = kn_.d - 17;
  run_all(v, Fill::hidden, false);
}

TEST_P(CudaHostile, HiddenNonFiniteV) {
  run_all(call(512, 512, true), Fill::hidden);  // NaN at key 400: once 8192 non-finite outputs
  run_all(call(300, 700, true), Fill::hidden);
  Call decode = call(4, 1000, true);  // 4 query heads per KV head: packed on sm90
  decode.H = 8;
  run_all(decode, Fill::hidden);
  Call window = call(1, 1000, false, 100, 0);
  window.H = 8;
  run_all(window, Fill::hidden);
  run_all(call(257, 257, false, 16, 16), Fill::hidden);
  run_all(call(64, 64, true, 8, -1), Fill::hidden);
  Call two = call(150, 400, true, 60, 0);
  two.B = 2;
  run_all(two, Fill::hidden);
  // Varlen: a tile of a sequence's last keys reaches the next sequence's first ones.
  run_all(varlen({0, 5, 5, 300}, {0, 130, 131, 700}, true), Fill::hidden);
  run_all(varlen({0, 70, 71, 200}, {0, 100, 333, 400}, false), Fill::hidden);
}

TEST_P(CudaHostile, HugeScores) {
  for (Fill f : {Fill::huge_pow2, Fill::huge_wide}) {
    // Wide values round differently on TF32's operands: there only the exact ones.
    if (f == Fill::huge_wide && kn_.dt == DType::f32) continue;
    SCOPED_TRACE(f == Fill::huge_pow2 ? "powers of two" : "wide values");
    run_all(call(200, 300), f);
    run_all(call(257, 257, true), f);
    Call neg = call(100, 333, false, 40, 10);
    neg.scale = -1.f / std::sqrt(float(kn_.d));
    run_all(neg, f);
    Call decode = call(1, 600, true);
    decode.H = 8;
    run_all(decode, f);
    run_all(varlen({0, 40, 41, 190}, {0, 70, 300, 333}, true), f);
  }
}

TEST_P(CudaHostile, NanQueryRows) {
  run_all(call(130, 200, true), Fill::nan_q);
  run_all(call(100, 100, false, 10, 0), Fill::nan_q);
}

TEST_P(CudaHostile, NoFiniteScore) {
  // (fp8 cannot hold -inf: only rows that see no key.)
  if (!kn_.fp8) {
    run_all(call(257, 257, false, 0, 0), Fill::minus_inf);  // rows whose one key scores -inf
    run_all(call(100, 300, false, 3, 0), Fill::minus_inf);
  }
  run_all(call(300, 200, true), kn_.fp8 ? Fill::hidden : Fill::minus_inf);  // the first 100 rows see no key
  run_all(varlen({0, 10, 20, 60}, {0, 0, 50, 50}, false), Fill::hidden);  // empty key sequences
}

TEST_P(CudaHostile, RandomNonFinite) {
  run_all(call(150, 260, true), Fill::random);
  run_all(call(100, 333, false, 20, 5), Fill::random);
}

// The variant kernels (sm80 family, the exact fp32 kernel; the sm90 and e4m3 kernels refuse
// the variants) keep the rules as the plain ones: the cleaning rerun, V's NaN / Inf added
// back, rows computed again (the transformed scores and the sink: a row with no finite
// score gets O = 0 and lse = its sink).
TEST_P(CudaHostile, Variants) {
  if ((kn_.sm90 && !kn_.sv) || kn_.fp8)
    GTEST_SKIP() << "the plain sm90 and the e4m3 kernels do not take the score variants";
  auto with = [](Call c, float softcap, bool alibi, bool sinks) {
    c.softcap = softcap;
    c.alibi = alibi;
    c.sinks = sinks;
    return c;
  };
  for (int v = 0; v < 3; ++v) {  // all three; ALiBi and sinks; softcap alone
    const float cap = v == 1 ? 0.f : 30.f;
    const bool alibi = v < 2, sinks = v < 2;
    SCOPED_TRACE(v == 0 ? "softcap, ALiBi, sinks" : v == 1 ? "ALiBi, sinks" : "softcap");
    run_all(with(call(512, 512, true), cap, alibi, sinks), Fill::hidden);
    run_all(with(call(257, 257, false, 16, 16), cap, alibi, sinks), Fill::hidden);
    run_all(with(varlen({0, 5, 5, 300}, {0, 130, 131, 700}, true), cap, alibi, sinks), Fill::hidden);
    // Huge scores: without softcap the rows are computed again (exactly near the max).
    run_all(with(call(200, 300), cap, alibi, sinks), Fill::huge_pow2);
    run_all(with(call(257, 257, true), cap, alibi, sinks), Fill::huge_pow2);
    run_all(with(call(130, 200, true), cap, alibi, sinks), Fill::nan_q);
    run_all(with(call(257, 257, false, 0, 0), cap, alibi, sinks), Fill::minus_inf);
    run_all(with(call(300, 200, true), cap, alibi, sinks), Fill::minus_inf);  // the first 100 rows see no key
    run_all(with(call(150, 260, true), cap, alibi, sinks), Fill::random);
  }
}

std::string key_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Cuda, CudaHostile, ::testing::ValuesIn(forward_keys()), key_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaHostile);

// A kernel key forced on tensors of another dtype is refused, naming params.impl, before
// anything runs.
TEST(CudaHostileArgs, ForcedKeyOfAnotherDtype) {
  FC_REQUIRE_GPU();
  const auto keys = forward_keys();
  for (const std::string& key : keys) {
    const Kernel kn = parse(key);
    for (DType dt : {DType::f16, DType::bf16, DType::f32, DType::e4m3}) {
      // (e4m3 tensors off sm90 are refused for the device first.)
      if (dt == kn.dt || (dt == DType::e4m3 && !sm90_missing().empty())) continue;
      SCOPED_TRACE(key + " on " + name(dt));
      HostTensor q(dt, {1, 8, 2, kn.d}), k(dt, {1, 8, 2, kn.d}), v(dt, {1, 8, 2, kn.d});
      HostTensor o(dt == DType::e4m3 ? DType::f16 : dt, {1, 8, 2, kn.d});
      Rng rng;
      q.fill_uniform(rng, -1, 1);
      k.fill_uniform(rng, -1, 1);
      v.fill_uniform(rng, -1, 1);
      o.poison();
      DevTensor dq(q), dk(k), dv(v), dout(o);
      fc::AttentionParams p;
      p.impl = key.c_str();
      try {
        fc::attention(dq.view(), dk.view(), dv.view(), dout.view(), p);
        ADD_FAILURE() << "not refused";
      } catch (const fc::Error& e) {
        EXPECT_EQ(e.code(), fc::Status::unsupported) << e.what();
        EXPECT_NE(std::string(e.what()).find("params.impl"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      }
      HostTensor back(o.dtype(), {1, 8, 2, kn.d});
      dout.download(back);
      for (int64_t i = 0; i < back.numel(); ++i) ASSERT_TRUE(std::isnan(back.get(i))) << "output written";
    }
  }
}

}  // namespace
}  // namespace fctest
