// Element-wise steps of the CPU backward (bwd_ops.hpp). Plain loops over branch-free
// scalar code (core/exp2.hpp, core/dtype.hpp's conversions), which the compiler
// vectorizes; each entry point is compiled for the baseline and for x86-64-v3, and the
// per-score loops (probs, probs_mod, dscores) for x86-64-v4 too (16 lanes: probs went from
// 2.7 to 1.9 % of an fp32 backward's perf samples, Sapphire Rapids, 2026-11-30).
#include "cpu/backward/bwd_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/clones.hpp"
#include "core/dtype.hpp"
#include "core/exp2.hpp"

namespace flashcore::cpu::bwd {
namespace {

template <bool kFast>
inline void probs_rows(float* s, int64_t ld, int64_t m, int64_t n, float c, const float* sub, const int64_t* lo,
                       const int64_t* hi) {
  for (int64_t i = 0; i < m; ++i) {
    float* r = s + i * ld;
    const int64_t a = std::clamp<int64_t>(lo[i], 0, n), b = std::clamp<int64_t>(hi[i], a, n);
    const float si = sub[i];
    std::fill(r, r + a, 0.0f);
    for (int64_t j = a; j < b; ++j) {
      const float x = c * r[j] - si;
      r[j] = kFast ? core::exp2_fast(x) : core::exp2_exact(x);
    }
    std::fill(r + b, r + n, 0.0f);
  }
}

// probs_mod's rows: one instantiation per (exp2 mode, softcap, ALiBi), no per-element branch.
template <bool kFast, bool kCap, bool kAlibi>
inline void probs_mod_rows(float* s, int64_t ld, int64_t m, int64_t n, const float* sub, const int64_t* lo,
                           const int64_t* hi, const ProbsMod& pm) {
  const float cap = pm.mod.softcap, inv = pm.mod.inv_softcap, scale = pm.scale, slope = pm.slope;
  for (int64_t i = 0; i < m; ++i) {
    float* r = s + i * ld;
    float* dz = kCap ? pm.dz + i * ld : nullptr;
    const int32_t a = int32_t(std::clamp<int64_t>(lo[i], 0, n)), b = int32_t(std::clamp<int64_t>(hi[i], a, n));
    const float si = sub[i], rel = float(pm.q0 + i);  // distance |rel - j| (exact below 2^24)
    std::fill(r, r + a, 0.0f);
    if (kCap) std::fill(dz, dz + a, 0.0f);
    for (int32_t j = a; j < b; ++j) {
      float z = scale * r[j];
      if (kCap) {
        float t;
        z = core::softcap_score(z, cap, inv, &t);
        dz[j] = 1.0f - t * t;
      }
      if (kAlibi) z = core::alibi_score(z, slope, std::fabs(rel - float(j)));
      const float x = core::kLog2e * z - si;
      r[j] = kFast ? core::exp2_fast(x) : core::exp2_exact(x);
    }
    std::fill(r + b, r + n, 0.0f);
    if (kCap) std::fill(dz + b, dz + n, 0.0f);
  }
}

template <bool kFast>
inline void probs_mod_as(float* s, int64_t ld, int64_t m, int64_t n, const float* sub, const int64_t* lo,
                         const int64_t* hi, const ProbsMod& pm) {
  const bool cap = pm.mod.softcap > 0.0f, alibi = pm.mod.alibi;
  if (cap && alibi)
    probs_mod_rows<kFast, true, true>(s, ld, m, n, sub, lo, hi, pm);
  else if (cap)
    probs_mod_rows<kFast, true, false>(s, ld, m, n, sub, lo, hi, pm);
  else
    probs_mod_rows<kFast, false, true>(s, ld, m, n, sub, lo, hi, pm);
}

// Stores of one fp32 value as the operand type E (float, or 16-bit bits).
struct StoreF32 { using E = float; static float cvt(float x) { return x; } };
struct StoreF16 { using E = uint16_t; static uint16_t cvt(float x) { return core::f32_to_f16(x); } };
struct StoreBF16 { using E = uint16_t; static uint16_t cvt(float x) { return core::f32_to_bf16(x); } };

// Transposed sources are walked in square blocks of this many elements a side, so that the
// strided side of the copy stays within a few cache lines.
constexpr int64_t kBlock = 16;

// dst[r * ld + c] = src[r * lds + c] as S's type, r < rows, c < cols.
template <class S>
inline void copy_as(const float* src, int64_t lds, int64_t rows, int64_t cols, typename S::E* dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * ld + c] = S::cvt(src[r * lds + c]);
}

// dst[c * ld + r] = src[r * lds + c] as S's type, r < rows, c < cols, in square blocks.
template <class S>
inline void transpose_as(const float* src, int64_t lds, int64_t rows, int64_t cols, typename S::E* dst, int64_t ld) {
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock)
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock)
      for (int64_t c = c0; c < std::min(cols, c0 + kBlock); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kBlock); ++r) dst[c * ld + r] = S::cvt(src[r * lds + c]);
}

template <class S>
inline void pack_as(const float* src, int64_t lds, bool tr, int64_t kk, int64_t mm, typename S::E* dst, int64_t ld,
                    Layout lay) {
  using E = typename S::E;
  switch (lay) {
    case Layout::kmajor:
      if (!tr) {
        copy_as<S>(src, lds, kk, mm, dst, ld);
      } else {
        transpose_as<S>(src, lds, mm, kk, dst, ld);
      }
      break;
    case Layout::kpairs:
      // (k, i) at (k / 2) * 2 * ld + 2 * i + k % 2: the pair row kp holds keys 2 kp, 2 kp + 1.
      if (!tr) {
        for (int64_t kp = 0; kp < kk / 2; ++kp) {
          const float* s0 = src + 2 * kp * lds;
          const float* s1 = s0 + lds;
          E* d = dst + kp * 2 * ld;
          for (int64_t i = 0; i < mm; ++i) {
            d[2 * i] = S::cvt(s0[i]);
            d[2 * i + 1] = S::cvt(s1[i]);
          }
        }
      } else {
        // A transpose of the source's (k, k + 1) pairs, in square blocks.
        for (int64_t i0 = 0; i0 < mm; i0 += kBlock)
          for (int64_t p0 = 0; p0 < kk / 2; p0 += kBlock)
            for (int64_t kp = p0; kp < std::min(kk / 2, p0 + kBlock); ++kp) {
              E* d = dst + kp * 2 * ld;
              for (int64_t i = i0; i < std::min(mm, i0 + kBlock); ++i) {
                d[2 * i] = S::cvt(src[i * lds + 2 * kp]);
                d[2 * i + 1] = S::cvt(src[i * lds + 2 * kp + 1]);
              }
            }
      }
      break;
    case Layout::rows:
      // (k, i) at i * ld + k: a transposed source is copied row by row.
      if (tr) {
        copy_as<S>(src, lds, mm, kk, dst, ld);
      } else {
        transpose_as<S>(src, lds, kk, mm, dst, ld);
      }
      break;
  }
}

}  // namespace

FC_PORTABLE_CLONES_V4 void probs(float* s, int64_t ld, int64_t m, int64_t n, float c, const float* sub,
                                 const int64_t* lo, const int64_t* hi, Exp2Mode mode) {
  if (mode == Exp2Mode::fast)
    probs_rows<true>(s, ld, m, n, c, sub, lo, hi);
  else
    probs_rows<false>(s, ld, m, n, c, sub, lo, hi);
}

FC_PORTABLE_CLONES_V4 void probs_mod(float* s, int64_t ld, int64_t m, int64_t n, const float* sub,
                                     const int64_t* lo, const int64_t* hi, Exp2Mode mode, const ProbsMod& pm) {
  if (mode == Exp2Mode::fast)
    probs_mod_as<true>(s, ld, m, n, sub, lo, hi, pm);
  else
    probs_mod_as<false>(s, ld, m, n, sub, lo, hi, pm);
}

FC_PORTABLE_CLONES_V4 void dscores(const float* p, float* dp, int64_t ld, int64_t m, int64_t n, const float* d,
                                   const float* dz) {
  for (int64_t i = 0; i < m; ++i) {
    const float* pr = p + i * ld;
    float* r = dp + i * ld;
    const float di = d[i];
    if (dz == nullptr) {
      for (int64_t j = 0; j < n; ++j) r[j] = pr[j] * (r[j] - di);
    } else {
      const float* zr = dz + i * ld;
      for (int64_t j = 0; j < n; ++j) r[j] = pr[j] * (r[j] - di) * zr[j];
    }
  }
}

FC_PORTABLE_CLONES void pack_operand(const float* src, int64_t lds, bool transposed, int64_t kk, int64_t mm,
                                     void* dst, int64_t ld, DType dt, Layout lay) {
  switch (dt) {
    case DType::f16: pack_as<StoreF16>(src, lds, transposed, kk, mm, static_cast<uint16_t*>(dst), ld, lay); break;
    case DType::bf16: pack_as<StoreBF16>(src, lds, transposed, kk, mm, static_cast<uint16_t*>(dst), ld, lay); break;
    default: pack_as<StoreF32>(src, lds, transposed, kk, mm, static_cast<float*>(dst), ld, lay); break;
  }
}

FC_PORTABLE_CLONES float dot(const float* a, const float* b, int64_t n) {
  // Eight partial sums: a vectorizable reduction without reassociating one sum by hand.
  float acc[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[j + l] * b[j + l];
  for (; j < n; ++j) acc[0] += a[j] * b[j];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

}  // namespace flashcore::cpu::bwd
