// libFuzzer target: random bytes -> shapes, strides, dtypes, devices, null and aliasing
// pointers, parameters (thread counts far beyond the machine too, score variants) -> attention /
// attention_backward / softmax_v / gemm_chain / reference / the C ABI (or, for calls that
// would do too much work to keep the fuzzer fast, the checks alone). Every call must return normally or
// throw flashcore::Error (the C ABI: return a status with a message); anything else
// (another exception, a sanitizer report, a leak, a timeout, the process ending) is a bug.
//
// Values too: the input plants NaN, +-Inf, huge and subnormal values in the buffer the
// tensors view, and an attention call that ran is compared with the fp64 reference under
// the library's rules (flashcore.hpp): an output element is finite exactly where the
// reference's is, lse is NaN / -inf exactly where the reference's is, and finite outputs
// stay within the spread of V (aborts otherwise).
//
// Memory safety of the harness itself: every tensor points into one real buffer and is
// given a pointer only when the elements its shape and strides reach lie inside that
// buffer (else nullptr), so an access out of the buffer is the library's fault. Dims
// are small (< 16) except for rare extreme values, which never fit the buffer.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "api/checks.hpp"
#include "core/dtype.hpp"
#include "cpu/dispatch/dispatch.hpp"
#include "flashcore/flashcore.h"
#include "flashcore/flashcore.hpp"

namespace {

namespace fc = flashcore;

constexpr size_t kBufBytes = size_t(1) << 20;
// Zero strides let a small buffer back a huge logical tensor, which the library may
// legally compute on; above this many multiply-adds only the argument checks run.
constexpr double kMaxWork = double(1 << 22);

// A bound on the loop trips of a call, fast path or fp64 reference (which has no early
// exits), from its nominal dims: every dim counts as at least 1.
double work(std::initializer_list<int64_t> dims) {
  double w = 1;
  for (int64_t d : dims) w *= double(std::max<int64_t>(d, 0)) + 1;
  return w;
}

// Input bytes, read front to back; zeros once exhausted.
class Reader {
 public:
  Reader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  uint8_t u8() { return i_ < n_ ? d_[i_++] : 0; }
  uint16_t u16() { return uint16_t(u8() | (u8() << 8)); }
  bool bit() { return u8() & 1; }

  // Mostly 0..15; one byte in eight picks an extreme value.
  int64_t dim() {
    const uint8_t b = u8();
    if ((b >> 5) != 0) return b & 15;
    static const int64_t kSpecial[] = {0, -1, int64_t(1) << 40, (int64_t(1) << 40) + 1,
                                       std::numeric_limits<int64_t>::max(),
                                       std::numeric_limits<int64_t>::min(), int64_t(1) << 20, 65537};
    return kSpecial[b & 7];
  }

 private:
  const uint8_t* d_;
  size_t n_, i_ = 0;
};

struct Arena {
  alignas(64) static inline uint8_t buf[kBufBytes];
  alignas(64) static inline uint8_t pristine[kBufBytes];
  static void reset() {
    static const bool init = [] {
      // Small finite values in every dtype's view: bytes 0x00..0x3F make f32/f16/bf16
      // numbers below 2 in magnitude (i32 views: non-negative ints below 2^30).
      uint32_t s = 1;
      for (size_t i = 0; i < kBufBytes; ++i) {
        s = s * 1664525u + 1013904223u;
        pristine[i] = uint8_t((s >> 24) & 0x3F);
      }
      return true;
    }();
    (void)init;
    std::memcpy(buf, pristine, kBufBytes);
  }
};

enum class Reach { nothing, range, too_far };

// The [lo, hi] element offsets a view reaches (extreme dims or strides: too far for any
// buffer, which also keeps this arithmetic from overflowing).
Reach reach(const fc::Tensor& t, __int128* lo, __int128* hi) {
  const int rank = std::clamp(t.rank, 0, fc::kMaxRank);
  constexpr int64_t kFar = int64_t(1) << 32;
  *lo = *hi = 0;
  bool far = false;
  for (int i = 0; i < rank; ++i) {
    if (t.shape[i] <= 0) return Reach::nothing;
    if (t.shape[i] > kFar || t.strides[i] > kFar || t.strides[i] < -kFar) far = true;
    if (far) continue;
    const __int128 span = __int128(t.shape[i] - 1) * t.strides[i];
    (span < 0 ? *lo : *hi) += span;
  }
  if (rank == 0) return Reach::nothing;
  return far ? Reach::too_far : Reach::range;
}

fc::DType dtype_of(uint8_t b) {
  // Mostly the expected CPU dtypes; sometimes fp8, i32 or an unknown code.
  static const int kCodes[] = {0, 0, 0, 1, 2, 1, 2, 5, 3, 4, 0, 1, 2, 0, 9, -1};
  return static_cast<fc::DType>(kCodes[b & 15]);
}

// One tensor of (nominal) rank `rank` whose dims are chosen by `dims`.
fc::Tensor make_tensor(Reader& r, int rank, const int64_t* dims, fc::DType dtype) {
  fc::Tensor t;
  const uint8_t mode = r.u8();
  t.rank = (mode & 0xF0) == 0xF0 ? (mode & 7) : rank;  // rarely a wrong rank (0..7)
  t.dtype = (mode & 0x0C) == 0x0C ? dtype_of(r.u8()) : dtype;
  const uint8_t dev = r.u8();
  t.device = dev >= 250 ? fc::Device::cuda : (dev == 249 ? static_cast<fc::Device>(2) : fc::Device::cpu);
  const int n = std::min(t.rank, fc::kMaxRank);
  for (int i = 0; i < n; ++i) t.shape[i] = i < rank ? dims[i] : r.dim();
  // Strides: row-major (maybe padded), the middle dims swapped (BHSD / column-major),
  // or raw values (maybe negative or huge).
  const uint8_t layout = r.u8() & 3;
  int order[fc::kMaxRank] = {0, 1, 2, 3};
  if (layout == 1 && n >= 2) std::swap(order[n - 2], order[n >= 3 ? n - 3 : n - 2]);
  if (layout == 1 && n == 2) std::swap(order[0], order[1]);
  if (layout == 3) {
    for (int i = 0; i < n; ++i) t.strides[i] = r.dim();
  } else {
    const int64_t pad = layout == 2 ? (r.u8() & 7) : 0;
    __int128 s = 1;
    for (int j = n - 1; j >= 0; --j) {
      const int d = order[j];
      t.strides[d] = int64_t(std::min<__int128>(s, std::numeric_limits<int64_t>::max()));
      s *= std::max<int64_t>(t.shape[d], 1);
      if (j == n - 1) s += pad;
      if (s > (__int128(1) << 62)) s = __int128(1) << 62;
    }
  }
  // Data: a pointer into the buffer when everything the view reaches fits, else null;
  // sometimes null on purpose. Offsets are multiples of 4 bytes (every dtype's alignment).
  const uint16_t where = r.u16();
  const size_t es = std::max<size_t>(fc::dtype_size(t.dtype), 1);
  __int128 lo, hi;
  const Reach rc = reach(t, &lo, &hi);
  if (rc == Reach::nothing) {
    // Reaches nothing: any pointer will do. (nullptr is legal here too, but the CPU
    // pipelines then form `nullptr + offset` row pointers, undefined behaviour that
    // UBSan reports; known and reported, so empty views get a real pointer.)
    t.data = Arena::buf + (where & 0x3FF) * 4;
  } else if ((where & 0xF000) == 0xF000 || rc == Reach::too_far) {
    t.data = nullptr;
  } else {
    const __int128 base = __int128(where & 0x3FFF) * 64;  // the view's element 0, in bytes
    const __int128 first = base + lo * __int128(es), last = base + (hi + 1) * __int128(es);
    t.data = (first >= 0 && last <= __int128(kBufBytes)) ? Arena::buf + size_t(base) : nullptr;
  }
  return t;
}

const char* impl_of(Reader& r) {
  const uint8_t b = r.u8();
  if (b < 160) return nullptr;
  if (b < 176) return "auto";
  if (b < 184) return "";
  if (b < 192) return "f32_0x0_nonesuch";
  const int n = fc::cpu::gemm_ukernel_count();
  return fc::cpu::gemm_ukernel(b % n).key;
}

// CPU thread counts: mostly small, sometimes far more than any machine has (refused by
// name: an OpenMP runtime that cannot create the threads ends the process).
int threads_of(Reader& r) {
  static const int kThreads[] = {-1, 0, 1, 2, 3, 64, 5000, std::numeric_limits<int>::max()};
  return kThreads[r.u8() & 7];
}

// The storage offset of logical element i (row-major order) of a view.
int64_t element_offset(const fc::Tensor& t, int64_t i) {
  int64_t off = 0;
  for (int d = t.rank - 1; d >= 0; --d) {
    off += (i % t.shape[d]) * t.strides[d];
    i /= t.shape[d];
  }
  return off;
}

// Plants up to 7 special values (NaN, +-Inf, huge, subnormal) at input-chosen elements
// of the views (f32 / f16 / bf16 ones that lie in the buffer).
void plant_values(Reader& r, std::initializer_list<const fc::Tensor*> views) {
  const int n = r.u8() & 7;
  for (int i = 0; i < n; ++i) {
    const fc::Tensor& t = **(views.begin() + r.u8() % views.size());
    const uint16_t pick = r.u16();
    const uint8_t kind = r.u8();
    const bool floats = t.dtype == fc::DType::f32 || t.dtype == fc::DType::f16 || t.dtype == fc::DType::bf16;
    __int128 lo, hi;
    if (!floats || t.data == nullptr || t.rank < 1 || t.rank > fc::kMaxRank || reach(t, &lo, &hi) != Reach::range)
      continue;
    const int64_t off = element_offset(t, pick % t.numel());
    const bool f16 = t.dtype == fc::DType::f16;
    const float kValues[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(), f16 ? 30000.0f : 1e15f,
                             f16 ? -30000.0f : -1e15f, f16 ? 1e-6f : 1e-40f};
    fc::core::store_from_f32(t.data, off, t.dtype, kValues[kind % 6]);
  }
}

float scale_of(Reader& r) {
  static const float kScales[] = {0.0f, 1.0f, 0.125f, -1.0f, 1e30f, std::numeric_limits<float>::quiet_NaN(),
                                  std::numeric_limits<float>::infinity(), 3.0f};
  return kScales[r.u8() & 7];
}

// Triage: FLASHCORE_FUZZ_TRACE=1 prints every decoded tensor (replay one input with it).
void trace(const char* name, const fc::Tensor& t) {
  static const bool on = std::getenv("FLASHCORE_FUZZ_TRACE") != nullptr;
  if (!on) return;
  std::fprintf(stderr, "%s: rank %d dtype %d device %d data %s shape", name, t.rank, int(t.dtype),
               int(t.device), t.data ? "buf" : "null");
  for (int i = 0; i < fc::kMaxRank; ++i) std::fprintf(stderr, " %lld", (long long)t.shape[i]);
  std::fprintf(stderr, " strides");
  for (int i = 0; i < fc::kMaxRank; ++i) std::fprintf(stderr, " %lld", (long long)t.strides[i]);
  std::fprintf(stderr, "\n");
}

void trace_params(const fc::AttentionParams& p) {
  static const bool on = std::getenv("FLASHCORE_FUZZ_TRACE") != nullptr;
  if (!on) return;
  std::fprintf(stderr,
               "params: scale %g causal %d window %lld %lld strategy %d exp2 %d threads %d impl '%s' "
               "softcap %g lse %d varlen %lld alibi %d sinks %d\n",
               double(p.scale), int(p.causal), (long long)p.window_left, (long long)p.window_right,
               int(p.strategy), int(p.exp2), p.threads, p.impl ? p.impl : "", double(p.softcap),
               p.lse != nullptr, (long long)p.varlen_batch, p.alibi_slopes != nullptr, p.sinks != nullptr);
}

template <class F>
void expect_clean(F&& call) {
  try {
    call();
  } catch (const fc::Error& e) {
    if (e.what()[0] == '\0') std::abort();  // an error must say something
  }
  // Any other exception escapes to libFuzzer, which reports it as a crash.
}

// The logical elements of a view (rank <= 4, f32/f16/bf16), row-major order.
std::vector<double> elements(const fc::Tensor& t) {
  std::vector<double> e;
  if (t.data == nullptr) return e;
  const int64_t n = t.numel();
  e.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) e.push_back(double(fc::core::load_as_f32(t.data, element_offset(t, i), t.dtype)));
  return e;
}

double max_finite_abs(const std::vector<double>& e) {
  double m = 0;
  for (double x : e)
    if (std::isfinite(x)) m = std::max(m, std::abs(x));
  return m;
}

// An attention call that ran (out, lse as it wrote them: `fast`, `fast_lse`) against the
// reference's out and lse for the same arguments: true when they agree, else false (and,
// when `fatal`, a report and abort). Skipped (true) where the library's contract does not
// reach: scaled scores or ALiBi biases that may leave fp32's range (flashcore.hpp), and a
// kernel forced by `impl` (its own precision, fp16 accumulation included).
bool check_values(const std::vector<double>& fast, const std::vector<double>& fast_lse, const fc::Tensor& q,
                  const fc::Tensor& k, const fc::Tensor& v, const fc::Tensor& o, const fc::AttentionParams& p,
                  bool fatal) {
  if (p.impl != nullptr && p.impl[0] != '\0' && std::strcmp(p.impl, "auto") != 0) return true;
  const double d = double(q.shape[3]);
  const double scale = p.scale == 0.0f ? 1.0 / std::sqrt(d) : std::abs(double(p.scale));
  if (scale * max_finite_abs(elements(q)) * max_finite_abs(elements(k)) * d > 1e37) return true;
  // ALiBi's bias, slope * |distance|, past fp32's range likewise (distance < Sq + Sk).
  const double reach = double(q.shape[1] + k.shape[1]);
  if (p.alibi_slopes && max_finite_abs(elements(*p.alibi_slopes)) * reach > 1e37) return true;
  const double vmax = max_finite_abs(elements(v));
  const std::vector<double> ref = elements(o);
  const std::vector<double> ref_lse = p.lse ? elements(*p.lse) : std::vector<double>{};
  auto fail = [&](const char* what, size_t i, double got, double want) {
    if (!fatal) return false;
    std::fprintf(stderr, "%s element %zu: %g, the reference %g, |v| <= %g\n", what, i, got, want, vmax);
    std::abort();
  };
  for (size_t i = 0; i < ref.size() && i < fast.size(); ++i) {
    if (std::isfinite(ref[i]) != std::isfinite(fast[i])) return fail("out", i, fast[i], ref[i]);
    if (std::isfinite(ref[i]) && std::abs(fast[i] - ref[i]) > 2 * vmax + 1e-3 * (1 + std::abs(ref[i])))
      return fail("out", i, fast[i], ref[i]);
  }
  for (size_t i = 0; i < ref_lse.size() && i < fast_lse.size(); ++i)
    if (std::isnan(ref_lse[i]) != std::isnan(fast_lse[i]) ||
        (ref_lse[i] == -INFINITY) != (fast_lse[i] == -INFINITY))
      return fail("lse", i, fast_lse[i], ref_lse[i]);
  return true;
}

// Writes 0 over every subnormal element of a 16-bit view (the sign kept), as the bf16 dot
// products of AMX and AVX512-BF16 and SVE's fp16 kernels (FPCR.FZ16) read them.
void flush_subnormals(const fc::Tensor& t) {
  if (t.data == nullptr || (t.dtype != fc::DType::f16 && t.dtype != fc::DType::bf16)) return;
  const float tiny = t.dtype == fc::DType::f16 ? 6.103515625e-05f : std::numeric_limits<float>::min();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t off = element_offset(t, i);
    const float x = fc::core::load_as_f32(t.data, off, t.dtype);
    if (x != 0.0f && std::abs(x) < tiny) fc::core::store_from_f32(t.data, off, t.dtype, std::copysign(0.0f, x));
  }
}

fc_tensor to_c(const fc::Tensor& t) {
  fc_tensor c;
  c.data = t.data;
  c.dtype = static_cast<fc_dtype>(t.dtype);
  c.device = static_cast<fc_device>(t.device);
  c.rank = t.rank;
  for (int i = 0; i < 4; ++i) {
    c.shape[i] = t.shape[i];
    c.strides[i] = t.strides[i];
  }
  return c;
}

// attention's options (the backward ignores the strategy), read in this order.
fc::AttentionParams attention_params(Reader& r) {
  fc::AttentionParams p;
  p.scale = scale_of(r);
  p.causal = r.bit();
  p.window_left = (r.u8() & 3) ? -1 : r.dim();
  p.window_right = (r.u8() & 3) ? -1 : r.dim();
  p.strategy = static_cast<fc::Strategy>(r.u8() % 6);
  p.exp2 = static_cast<fc::Exp2Mode>(r.u8() % 3);
  p.threads = threads_of(r);
  p.impl = impl_of(r);
  return p;
}

// Sometimes varlen: the arrays always hold varlen_batch + 1 entries (a shorter array is a
// caller bug the library cannot see); sometimes one of them null.
void read_varlen(Reader& r, fc::AttentionParams& p, int32_t* cu_q, int32_t* cu_k) {
  if ((r.u8() & 7) != 0) return;
  p.varlen_batch = int64_t(r.u8() % 8) - 1;
  for (int i = 0; i < 8; ++i) {
    cu_q[i] = int32_t(int8_t(r.u8()));
    cu_k[i] = int32_t(int8_t(r.u8()));
  }
  const uint8_t which = r.u8() % 4;
  p.cu_seqlens_q = which == 1 ? nullptr : cu_q;
  p.cu_seqlens_k = which == 2 ? nullptr : cu_k;
}

// Score variants, read after everything else (so that older inputs decode as before, without
// them): a softcap (odd values included), ALiBi slopes [H] or [B, H] and sinks [H] viewing the
// buffer (its values; sometimes another dtype or shape).
void read_variants(Reader& r, fc::AttentionParams& p, int64_t b, int64_t h, fc::Tensor& slopes, fc::Tensor& sinks) {
  const uint8_t which = r.u8();
  if (which & 1) p.softcap = scale_of(r);
  const int64_t bh[] = {b, h};
  if (which & 2) {
    const fc::DType t = (r.u8() & 7) == 0 ? fc::DType::f16 : fc::DType::f32;
    slopes = (which & 8) ? make_tensor(r, 2, bh, t) : make_tensor(r, 1, bh + 1, t);
    trace("alibi_slopes", slopes);
    p.alibi_slopes = &slopes;
  }
  if (which & 4) {
    sinks = make_tensor(r, 1, bh + 1, (r.u8() & 7) == 0 ? fc::DType::bf16 : fc::DType::f32);
    trace("sinks", sinks);
    p.sinks = &sinks;
  }
}

// The options the fuzzer sets, as the C struct (lse and the variants' arrays left null).
fc_attention_params to_c(const fc::AttentionParams& p) {
  fc_attention_params cp;
  fc_attention_params_init(&cp);
  cp.scale = p.scale;
  cp.causal = p.causal;
  cp.window_left = p.window_left;
  cp.window_right = p.window_right;
  cp.strategy = static_cast<fc_strategy>(p.strategy);
  cp.exp2 = static_cast<fc_exp2_mode>(p.exp2);
  cp.threads = p.threads;
  cp.impl = p.impl;
  cp.cu_seqlens_q = p.cu_seqlens_q;
  cp.cu_seqlens_k = p.cu_seqlens_k;
  cp.varlen_batch = p.varlen_batch;
  cp.deterministic = p.deterministic;
  cp.softcap = p.softcap;
  return cp;
}

void fuzz_attention(Reader& r) {
  const int64_t b = r.dim(), sq = r.dim(), sk = r.dim(), h = r.dim(), d = r.dim(), dv = r.dim();
  const uint8_t g = r.u8();
  const int64_t hkv = (g & 0x80) ? r.dim() : std::max<int64_t>(1, h / std::max(1, g & 7));
  const fc::DType dt = dtype_of(r.u8());
  const int64_t qd[] = {b, sq, h, d}, kd[] = {b, sk, hkv, d}, vd[] = {b, sk, hkv, dv}, od[] = {b, sq, h, dv};
  const fc::Tensor q = make_tensor(r, 4, qd, dt), k = make_tensor(r, 4, kd, dt), v = make_tensor(r, 4, vd, dt);
  const fc::Tensor o = make_tensor(r, 4, od, dt);
  trace("q", q), trace("k", k), trace("v", v), trace("out", o);
  plant_values(r, {&q, &k, &v});
  fc::AttentionParams p = attention_params(r);
  fc::Tensor lse;
  if (r.bit()) {
    const int64_t ld[] = {b, h, sq};
    lse = make_tensor(r, 3, ld, (r.u8() & 7) == 0 ? fc::DType::f16 : fc::DType::f32);
    p.lse = &lse;
  }
  int32_t cu_q[8], cu_k[8];
  read_varlen(r, p, cu_q, cu_k);
  fc::Tensor slopes, sinks;
  read_variants(r, p, b, h, slopes, sinks);
  trace_params(p);
  const int64_t B = q.shape[0], Sq = q.shape[1], H = q.shape[2], Sk = k.shape[1];
  if (work({B, Sq, H, Sk, q.shape[3]}) + work({B, Sq, H, Sk, v.shape[3]}) > kMaxWork) {
    expect_clean([&] { fc::api::check_attention(q, k, v, o, p); });
    return;
  }
  bool ok = false;
  expect_clean([&] {
    fc::attention(q, k, v, o, p);
    ok = true;
  });
  if (ok) {
    const std::vector<double> fast = elements(o), fast_lse = p.lse ? elements(*p.lse) : std::vector<double>{};
    bool ref_ok = false;
    expect_clean([&] {
      fc::reference::attention(q, k, v, o, p);
      ref_ok = true;
    });
    // 16-bit kernels may read subnormal inputs as zero (flashcore.hpp), which turns a
    // subnormal times an Inf into NaN: a 16-bit call that disagrees is checked again
    // against the reference on its inputs with the subnormals flushed.
    const bool half = q.dtype == fc::DType::f16 || q.dtype == fc::DType::bf16;
    if (ref_ok && !check_values(fast, fast_lse, q, k, v, o, p, !half)) {
      flush_subnormals(q), flush_subnormals(k), flush_subnormals(v);
      expect_clean([&] { fc::reference::attention(q, k, v, o, p); });
      check_values(fast, fast_lse, q, k, v, o, p, true);
    }
  }

  // The same call through the C ABI (sometimes with a null struct pointer).
  fc_tensor cq = to_c(q), ck = to_c(k), cv = to_c(v), co = to_c(o), cl = to_c(lse);
  fc_attention_params cp = to_c(p);
  cp.lse = p.lse ? &cl : nullptr;
  fc_tensor cs = to_c(slopes), csink = to_c(sinks);
  cp.alibi_slopes = p.alibi_slopes ? &cs : nullptr;
  cp.sinks = p.sinks ? &csink : nullptr;
  const uint8_t nul = r.u8();
  const fc_status st = fc_attention(nul == 1 ? nullptr : &cq, &ck, &cv, nul == 2 ? nullptr : &co,
                                    nul == 3 ? nullptr : &cp);
  if (int(st) < 0 || int(st) > 4) std::abort();
  if (st != FC_OK && fc_last_error()[0] == '\0') std::abort();
}

void fuzz_softmax_v(Reader& r) {
  const int64_t m = r.dim(), l = r.dim(), d = r.dim();
  const fc::DType dt = dtype_of(r.u8());
  const fc::DType st = (r.u8() & 1) ? fc::DType::i32 : fc::DType::f32;
  const int64_t sd[] = {m, l}, vd[] = {l, d}, od[] = {m, d};
  const fc::Tensor s = make_tensor(r, 2, sd, st), v = make_tensor(r, 2, vd, dt), o = make_tensor(r, 2, od, dt);
  trace("s", s), trace("v", v), trace("out", o);
  fc::SoftmaxVParams p;
  p.scale = scale_of(r);
  p.strategy = static_cast<fc::Strategy>(r.u8() % 6);
  p.exp2 = static_cast<fc::Exp2Mode>(r.u8() % 3);
  p.threads = threads_of(r);
  p.impl = impl_of(r);
  if (work({s.shape[0], s.shape[1], v.shape[1]}) > kMaxWork) {
    expect_clean([&] { fc::api::check_softmax_v(s, v, o, p); });
    return;
  }
  bool ok = false;
  expect_clean([&] {
    fc::softmax_v(s, v, o, p);
    ok = true;
  });
  if (ok) expect_clean([&] { fc::reference::softmax_v(s, v, o, p); });
  fc_tensor cs = to_c(s), cv = to_c(v), co = to_c(o);
  const fc_status status = fc_softmax_v(&cs, &cv, &co, p.scale, static_cast<fc_strategy>(p.strategy),
                                        static_cast<fc_exp2_mode>(p.exp2), p.threads);
  if (status != FC_OK && fc_last_error()[0] == '\0') std::abort();
}

void fuzz_gemm_chain(Reader& r) {
  const int64_t m = r.dim(), k1 = r.dim(), k2 = r.dim(), n = r.dim();
  const fc::DType dt = dtype_of(r.u8());
  const int64_t ad[] = {m, k1}, bd[] = {k1, k2}, cd[] = {k2, n}, od[] = {m, n};
  const fc::Tensor a = make_tensor(r, 2, ad, dt), b = make_tensor(r, 2, bd, dt), c = make_tensor(r, 2, cd, dt);
  const fc::Tensor o = make_tensor(r, 2, od, dt);
  trace("a", a), trace("b", b), trace("c", c), trace("out", o);
  fc::GemmChainParams p;
  p.threads = threads_of(r);
  p.impl = impl_of(r);
  if (work({a.shape[0], b.shape[1], a.shape[1]}) + work({a.shape[0], b.shape[1], c.shape[1]}) > kMaxWork) {
    expect_clean([&] { fc::api::check_gemm_chain(a, b, c, o, p); });
    return;
  }
  bool ok = false;
  expect_clean([&] {
    fc::gemm_chain(a, b, c, o, p);
    ok = true;
  });
  if (ok) expect_clean([&] { fc::reference::gemm_chain(a, b, c, o); });
  fc_tensor ca = to_c(a), cb = to_c(b), cc = to_c(c), co = to_c(o);
  const fc_status status = fc_gemm_chain(&ca, &cb, &cc, &co, p.threads);
  if (status != FC_OK && fc_last_error()[0] == '\0') std::abort();
}

// attention_backward: the forward's arguments, dout, lse and three gradients, each of which
// may be malformed, aliased (all point into one buffer) or on the wrong device.
void fuzz_attention_backward(Reader& r) {
  const int64_t b = r.dim(), sq = r.dim(), sk = r.dim(), h = r.dim(), d = r.dim(), dv = r.dim();
  const uint8_t g = r.u8();
  const int64_t hkv = (g & 0x80) ? r.dim() : std::max<int64_t>(1, h / std::max(1, g & 7));
  const fc::DType dt = dtype_of(r.u8());
  const int64_t qd[] = {b, sq, h, d}, kd[] = {b, sk, hkv, d}, vd[] = {b, sk, hkv, dv}, od[] = {b, sq, h, dv},
                ld[] = {b, h, sq};
  const fc::Tensor q = make_tensor(r, 4, qd, dt), k = make_tensor(r, 4, kd, dt), v = make_tensor(r, 4, vd, dt),
                   o = make_tensor(r, 4, od, dt), dout = make_tensor(r, 4, od, dt),
                   lse = make_tensor(r, 3, ld, (r.u8() & 7) == 0 ? fc::DType::f16 : fc::DType::f32),
                   dq = make_tensor(r, 4, qd, dt), dk = make_tensor(r, 4, kd, dt), dvt = make_tensor(r, 4, vd, dt);
  trace("q", q), trace("k", k), trace("v", v), trace("out", o), trace("dout", dout), trace("lse", lse);
  trace("dq", dq), trace("dk", dk), trace("dv", dvt);
  fc::AttentionParams p = attention_params(r);
  p.deterministic = r.bit();
  int32_t cu_q[8], cu_k[8];
  read_varlen(r, p, cu_q, cu_k);
  fc::Tensor slopes, sinks, dsinks;
  read_variants(r, p, b, h, slopes, sinks);
  if (r.bit()) {
    const int64_t hd[] = {h};
    dsinks = make_tensor(r, 1, hd, fc::DType::f32);
    trace("dsinks", dsinks);
    p.dsinks = &dsinks;
  }
  const int64_t B = q.shape[0], Sq = q.shape[1], H = q.shape[2], Sk = k.shape[1];
  if (3 * work({B, Sq, H, Sk, q.shape[3]}) + 2 * work({B, Sq, H, Sk, v.shape[3]}) > kMaxWork) return;
  bool ok = false;
  expect_clean([&] {
    fc::attention_backward(q, k, v, o, dout, lse, dq, dk, dvt, p);
    ok = true;
  });
  if (ok) expect_clean([&] { fc::reference::attention_backward(q, k, v, o, dout, lse, dq, dk, dvt, p); });
  fc_tensor c[12] = {to_c(q),  to_c(k),  to_c(v),   to_c(o),      to_c(dout),  to_c(lse),
                     to_c(dq), to_c(dk), to_c(dvt), to_c(slopes), to_c(sinks), to_c(dsinks)};
  fc_attention_params cp = to_c(p);
  cp.alibi_slopes = p.alibi_slopes ? &c[9] : nullptr;
  cp.sinks = p.sinks ? &c[10] : nullptr;
  cp.dsinks = p.dsinks ? &c[11] : nullptr;
  const fc_status st = fc_attention_backward(&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6], &c[7], &c[8], &cp);
  if (int(st) < 0 || int(st) > 4) std::abort();
  if (st != FC_OK && fc_last_error()[0] == '\0') std::abort();
}

// Small int32 values from the input (sometimes negative, sometimes past any bound) written
// into the elements of an i32 view that lies in the buffer: cache_seqlens and block tables
// the checks must read and judge.
void plant_ints(Reader& r, const fc::Tensor& t, int lo, int span) {
  __int128 a, b;
  if (t.dtype != fc::DType::i32 || t.data == nullptr || t.rank < 1 || t.rank > 2 || reach(t, &a, &b) != Reach::range)
    return;
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n && i < 64; ++i) {
    const int64_t row = t.rank == 2 ? i / t.shape[1] : i, col = t.rank == 2 ? i % t.shape[1] : 0;
    const int64_t off = t.rank == 2 ? row * t.strides[0] + col * t.strides[1] : row * t.strides[0];
    static_cast<int32_t*>(t.data)[off] = int32_t(lo + r.u8() % span);
  }
}

// attention_with_kvcache: q, a contiguous or paged cache (NHD or HND; page sizes mostly
// multiples of 8), cache_seqlens and a block table holding small input-chosen values
// (negative ones and page ids past the cache too), new keys sometimes (or one of k_new /
// v_new alone); every view may be malformed, aliased or on the wrong device.
void fuzz_kvcache(Reader& r) {
  const int64_t b = r.dim(), sq = r.dim(), h = r.dim(), d = r.dim(), slots = r.dim(), s_new = r.dim(),
                max_pages = r.dim();
  const uint8_t g = r.u8();
  const int64_t hkv = (g & 0x80) ? r.dim() : std::max<int64_t>(1, h / std::max(1, g & 7));
  const fc::DType dt = dtype_of(r.u8());
  const uint8_t kind = r.u8();
  const bool paged = kind & 1, hnd = kind & 2;
  const int64_t rows = (kind & 12) ? 8 * ((kind >> 4) % 3 + 1) : r.dim();  // page size or S_max
  const int64_t qd[] = {b, sq, h, d}, nd[] = {b, s_new, hkv, d}, bd[] = {b}, td[] = {b, max_pages};
  const int64_t cd[] = {paged ? slots : b, hnd ? hkv : rows, hnd ? rows : hkv, d};
  const fc::Tensor q = make_tensor(r, 4, qd, dt), kc = make_tensor(r, 4, cd, dt), vc = make_tensor(r, 4, cd, dt),
                   o = make_tensor(r, 4, qd, dt), kn = make_tensor(r, 4, nd, dt), vn = make_tensor(r, 4, nd, dt);
  const fc::Tensor lens = make_tensor(r, 1, bd, (r.u8() & 7) == 0 ? fc::DType::f32 : fc::DType::i32);
  const fc::Tensor table = make_tensor(r, 2, td, (r.u8() & 7) == 0 ? fc::DType::f16 : fc::DType::i32);
  trace("q", q), trace("k_cache", kc), trace("v_cache", vc), trace("out", o), trace("k_new", kn);
  trace("v_new", vn), trace("cache_seqlens", lens), trace("block_table", table);
  plant_ints(r, lens, -2, 40);
  plant_ints(r, table, -1, int(std::clamp<int64_t>(slots, 0, 200)) + 2);
  fc::KvCacheOptions opt;
  opt.layout = hnd ? fc::KvLayout::hnd : fc::KvLayout::nhd;
  if (paged) opt.block_table = &table;
  const uint8_t news = r.u8() & 3;
  if (news == 1 || news == 3) opt.k_new = &kn;
  if (news == 2 || news == 3) opt.v_new = &vn;
  fc::AttentionParams p = attention_params(r);
  fc::Tensor lse;
  if (r.bit()) {
    const int64_t ld[] = {b, h, sq};
    lse = make_tensor(r, 3, ld, fc::DType::f32);
    p.lse = &lse;
  }
  // (the keys a sequence may have: the cache's rows, or max_pages pages, and the new ones)
  if (work({q.shape[0], q.shape[1], q.shape[2], rows, paged ? max_pages : 0, q.shape[3]}) +
          work({q.shape[0], q.shape[1], q.shape[2], s_new, q.shape[3]}) >
      kMaxWork)
    return;
  expect_clean([&] { fc::attention_with_kvcache(q, kc, vc, lens, o, opt, p); });
  fc_tensor c[8] = {to_c(q), to_c(kc), to_c(vc), to_c(lens), to_c(table), to_c(kn), to_c(vn), to_c(o)};
  const fc_attention_params cp = to_c(p);
  const fc_status st = fc_attention_with_kvcache(&c[0], &c[1], &c[2], &c[3], paged ? &c[4] : nullptr,
                                                 opt.k_new ? &c[5] : nullptr, opt.v_new ? &c[6] : nullptr,
                                                 static_cast<fc_kv_layout>(kind >> 6), &c[7], &cp);
  if (int(st) < 0 || int(st) > 4) std::abort();
  if (st != FC_OK && fc_last_error()[0] == '\0') std::abort();
}

// merge_states: 0..3 parts (n = 0 refused), each a state view that may be malformed,
// aliased or on the wrong device; out and lse sometimes a part's own views (in place).
void fuzz_merge_states(Reader& r) {
  const int64_t b = r.dim(), s = r.dim(), h = r.dim(), d = r.dim();
  const int n = r.u8() % 4;
  const fc::DType dt = dtype_of(r.u8());
  const int64_t od[] = {b, s, h, d}, ld[] = {b, h, s};
  std::vector<fc::Tensor> outs, lses;
  for (int i = 0; i < n; ++i) {
    outs.push_back(make_tensor(r, 4, od, dt));
    lses.push_back(make_tensor(r, 3, ld, (r.u8() & 7) == 0 ? fc::DType::f16 : fc::DType::f32));
    trace("out part", outs.back()), trace("lse part", lses.back());
  }
  if (n > 0) plant_values(r, {&outs[0], &lses[0], &outs[size_t(n - 1)], &lses[size_t(n - 1)]});
  const uint8_t in_place = r.u8();
  const fc::Tensor o = n > 0 && (in_place & 1) ? outs[0] : make_tensor(r, 4, od, (r.u8() & 3) ? dt : fc::DType::f32);
  const fc::Tensor l = n > 0 && (in_place & 2) ? lses[size_t(n - 1)] : make_tensor(r, 3, ld, fc::DType::f32);
  trace("out", o), trace("lse", l);
  fc::MergeStatesParams p;
  p.threads = threads_of(r);
  if (work({o.shape[0], o.shape[1], o.shape[2], o.shape[3], n}) > kMaxWork) return;
  expect_clean([&] { fc::merge_states(outs.data(), lses.data(), n, o, l, p); });
  if (n >= 2) expect_clean([&] { fc::merge_states(outs[0], lses[0], outs[1], lses[1], o, l, p); });
  std::vector<fc_tensor> co, cl;
  for (int i = 0; i < n; ++i) {
    co.push_back(to_c(outs[size_t(i)]));
    cl.push_back(to_c(lses[size_t(i)]));
  }
  const fc_tensor cout_ = to_c(o), clse = to_c(l);
  const fc_status st = fc_merge_states(co.data(), cl.data(), n, &cout_, &clse, p.threads, nullptr);
  if (int(st) < 0 || int(st) > 4) std::abort();
  if (st != FC_OK && fc_last_error()[0] == '\0') std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Arena::reset();
  Reader r(data, size);
  const uint8_t op = r.u8();
  if (op >= 0xF0) {  // (the three forward ops keep the mapping of the inputs below 0xE0)
    fuzz_attention_backward(r);
    return 0;
  }
  if (op >= 0xE0) {
    if (op < 0xE8) fuzz_kvcache(r);
    else fuzz_merge_states(r);
    return 0;
  }
  switch (op % 3) {
    case 0: fuzz_attention(r); break;
    case 1: fuzz_softmax_v(r); break;
    default: fuzz_gemm_chain(r); break;
  }
  return 0;
}
