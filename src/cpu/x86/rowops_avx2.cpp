// AVX2 + FMA (+ F16C) row ops of the decode path (RowOps in ukernel.hpp) for the AVX2
// kernels: K and V rows read in place. The AVX-512 set's design (rowops_avx512.cpp) on
// 8-lane ymm:
//
// dot, two forms:
// - few queries (mq <= kFewQueries): the head dim in the lanes. 8 / mq keys at a time, all
//   queries at once: 8 accumulators (key, query) of d/8 FMAs each (each key row chunk
//   loaded once for the mq queries), then one transposing reduction (horizontal adds and a
//   128-bit swap) turns the 8 vectors into the 8 scores.
// - more queries: the queries in the lanes (8 per ymm, masked loads and stores past mq),
//   8 keys at a time: per head-dim element one load of the transposed queries and 8
//   broadcast FMAs.
//
// axpy: the value columns in the lanes, up to 4 query rows x 2 ymm of accumulators, keys
// in chunks of kAxpyChunk so that each chunk of V rows is read from memory once and from
// L1 by the other row blocks.
//
// Both prefetch the rows they read next: in BSHD tensors consecutive keys are a whole row
// of heads apart, each on its own page, where the hardware prefetchers do not follow.
// Zen 3 VM, 2 threads, decode B1 H32/8 Sq1 Sk8192 D128 f32: docs/results/cpu-avx2-2026-11-25.md.
//
// Each is compiled for fp32 rows and for 16-bit rows read in place, widened in registers as
// the AVX-512 set does: bf16 (dot_bf16, axpy_bf16: zero-extension and a shift) and fp16
// (dot_f16, axpy_f16: VCVTPH2PS, F16C), exact, so bit for bit the fp32 form on the widened
// values. Without them a 16-bit cache's rows were first converted to an fp32 copy.
#include <immintrin.h>

#include <cstdint>

#include "cpu/ukernels/row_forms.hpp"
#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::ukernels {
namespace {

template <int kLocality = 3, typename E>
inline void prefetch_row(const E* row, int64_t bytes) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, kLocality);
}

// Lane mask of the first n lanes (n may be <= 0 or >= 8), for maskload / maskstore.
inline __m256i lanes(int64_t n) {
  const int64_t c = n < 0 ? 0 : n > 8 ? 8 : n;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(c)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Loads and stores of 8 lanes, masked only where kFull is false (vmaskmovps stores are
// microcoded on AMD Zen).
template <bool kFull>
inline __m256 load8(const float* p, __m256i m) {
  return kFull ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m);
}
template <bool kFull>
inline void store8(float* p, __m256i m, __m256 x) {
  if (kFull) _mm256_storeu_ps(p, x);
  else _mm256_maskstore_ps(p, m, x);
}

// Row elements (E: float; uint16_t holding bf16 bits; Half holding fp16 bits) as fp32: 8 of
// them, the first n (0..8, the rest zero; 16-bit rows through a zeroed copy, as AVX2 has no
// masked 16-bit load), or one.
inline __m256 widen8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 widen8(const uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
inline __m256 widen8(const Half* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 widen8_n(const float* p, int64_t n) { return _mm256_maskload_ps(p, lanes(n)); }
template <typename E>
inline __m256 widen8_n(const E* p, int64_t n) {
  alignas(16) E b[8] = {};
  for (int64_t i = 0; i < n && i < 8; ++i) b[i] = p[i];
  return widen8(b);
}
inline float elem(const float* p) { return *p; }
inline float elem(const uint16_t* p) { return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(int(uint32_t(*p) << 16)))); }
inline float elem(const Half* p) { return _cvtsh_ss(p->bits); }

constexpr int64_t kFewQueries = 8;
// dot_few's prefetch distance in keys (a decode tile of 8 kv heads holds 32 keys per head).
constexpr int64_t kFewAhead = 16;
constexpr int kDotKeys = 8;
constexpr int64_t kDotAhead = 2 * kDotKeys;  // rows prefetched this many keys ahead

// Lane r of the result = the sum of the 8 lanes of a[r].
inline __m256 reduce8(const __m256 (&a)[8]) {
  // hadd pairs within each 128-bit half: after two rounds, half h of s0 holds the sums of
  // half h of a0..a3, and of s1 those of a4..a7.
  const __m256 s0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 s1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
}

// Scores of kc keys for MQ queries (MQ <= kFewQueries), head dim in the lanes: G = 8 / MQ
// keys at a time, accumulator g MQ + i for (key g, query i), so that each key row's chunk is
// loaded (and widened) once for all MQ queries, the query chunks read from L1 as FMA
// operands; one transposing reduction then gives lane g MQ + i that score. (Before, one
// query at a time: a 16-bit key chunk was widened MQ times.)
template <int MQ, typename E>
void dot_few(int64_t kc, int64_t d, const E* x, int64_t xs, const float* q, float* t, int64_t ldt) {
  constexpr int G = 8 / MQ, L = G * MQ;
  const int64_t row_bytes = d * int64_t(sizeof(E));
  const int64_t dfull = d / 8 * 8;
  const __m256i tail = lanes(d - dfull);
  for (int64_t k = 0; k < kc; k += G) {
    for (int64_t r = k + kFewAhead; r < k + kFewAhead + G && r < kc; ++r) prefetch_row(x + r * xs, row_bytes);
    const int64_t nk = kc - k < G ? kc - k : G;
    const E* xr[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) xr[g] = x + (k + (g < nk ? g : nk - 1)) * xs;  // spare keys: a copy
    __m256 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t c = 0; c < dfull; c += 8) {
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        const __m256 xv = widen8(xr[g] + c);
#pragma GCC unroll 8
        for (int i = 0; i < MQ; ++i) acc[g * MQ + i] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(q + i * d + c), acc[g * MQ + i]);
      }
    }
    if (dfull < d) {
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        const __m256 xv = widen8_n(xr[g] + dfull, d - dfull);
#pragma GCC unroll 8
        for (int i = 0; i < MQ; ++i)
          acc[g * MQ + i] = _mm256_fmadd_ps(xv, _mm256_maskload_ps(q + i * d + dfull, tail), acc[g * MQ + i]);
      }
    }
    const __m256 s = reduce8(acc);
    if (ldt == MQ) {  // (lane g MQ + i is element g ldt + i)
      _mm256_maskstore_ps(t + k * ldt, lanes(nk * MQ), s);
    } else {
      alignas(32) float sv[8];
      _mm256_store_ps(sv, s);
      for (int64_t g = 0; g < nk; ++g)
        for (int i = 0; i < MQ; ++i) t[(k + g) * ldt + i] = sv[g * MQ + i];
    }
    static_assert(L <= 8, "one ymm of scores");
  }
}

template <int R, bool kFull, typename E>
inline void dot_keys(int64_t d, const E* x, int64_t xs, const float* y, int64_t mq, __m256i m, float* t,
                     int64_t ldt) {
  __m256 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t e = 0; e < d; ++e) {
    const __m256 ye = load8<kFull>(y + e * mq, m);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(elem(x + r * xs + e)), ye, acc[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) store8<kFull>(t + r * ldt, m, acc[r]);
}

template <bool kFull, typename E>
void dot_lanes(int64_t kc, int64_t d, const E* x, int64_t xs, const float* y, int64_t mq, __m256i m, float* t,
               int64_t ldt, bool prefetch) {
  const int64_t row_bytes = d * int64_t(sizeof(E));
  int64_t k = 0;
  for (; k + kDotKeys <= kc; k += kDotKeys) {
    if (prefetch)
      for (int64_t r = k + kDotAhead; r < k + kDotAhead + kDotKeys && r < kc; ++r)
        prefetch_row(x + r * xs, row_bytes);
    dot_keys<kDotKeys, kFull>(d, x + k * xs, xs, y, mq, m, t + k * ldt, ldt);
  }
  for (; k < kc; ++k) dot_keys<1, kFull>(d, x + k * xs, xs, y, mq, m, t + k * ldt, ldt);
}

template <typename E>
void dot(int64_t kc, int64_t d, const E* x, int64_t xs, const float* q, const float* y, int64_t mq, float* t,
         int64_t ldt) {
  if (few_queries<kFewQueries>(mq, [&](auto c) { dot_few<decltype(c)::value>(kc, d, x, xs, q, t, ldt); })) return;
  for (int64_t i0 = 0; i0 < mq; i0 += 8) {
    const __m256i m = lanes(mq - i0);
    if (mq - i0 >= 8)
      dot_lanes<true>(kc, d, x, xs, y + i0, mq, m, t + i0, ldt, i0 == 0);
    else
      dot_lanes<false>(kc, d, x, xs, y + i0, mq, m, t + i0, ldt, i0 == 0);
  }
}

// Keys per L1 chunk of V rows (and the prefetch distance): a decode tile of 8 kv heads holds
// 32 keys per head, so at 32 the next chunk's prefetch never fired; 16 made the fp32 decode
// rows 1.43x (B32 Sk4096) and 1.53x (B1 Sk8192) faster on an AVX2 VM
// (docs/results/cpu-avx2-decode-2026-12-02.md).
constexpr int64_t kAxpyChunk = 16;
constexpr int kAxpyVecs = 2;        // ymm of value columns per accumulator row

template <int R, bool kFull, typename E>
inline void axpy_block(int64_t kc, int64_t ldp, const float* p, const E* v, int64_t vs, int64_t n, float* o,
                       int64_t ldo, bool prefetch, int64_t row_bytes) {
  __m256i m[kAxpyVecs];
  __m256 acc[R][kAxpyVecs];
#pragma GCC unroll 2
  for (int c = 0; c < kAxpyVecs; ++c) m[c] = lanes(n - 8 * c);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int c = 0; c < kAxpyVecs; ++c) acc[r][c] = load8<kFull>(o + r * ldo + 8 * c, m[c]);
  for (int64_t k = 0; k < kc; ++k) {
    // Into L2: the next chunk's rows would evict this chunk's from L1, which the other
    // column and row blocks read again.
    if (prefetch) prefetch_row<2>(v + (k + kAxpyChunk) * vs, row_bytes);
    __m256 vk[kAxpyVecs];
#pragma GCC unroll 2
    for (int c = 0; c < kAxpyVecs; ++c) vk[c] = kFull ? widen8(v + k * vs + 8 * c) : widen8_n(v + k * vs + 8 * c, n - 8 * c);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 pk = _mm256_broadcast_ss(p + k * ldp + r);
#pragma GCC unroll 2
      for (int c = 0; c < kAxpyVecs; ++c) acc[r][c] = _mm256_fmadd_ps(pk, vk[c], acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int c = 0; c < kAxpyVecs; ++c) store8<kFull>(o + r * ldo + 8 * c, m[c], acc[r][c]);
}

// The rows of one column block [j0, j0 + nj) of a key chunk, 4 query rows at a time.
template <bool kFull, typename E>
void axpy_rows(int64_t kl, int64_t mq, const float* pk, int64_t ldp, const E* vk, int64_t vs, int64_t nj, float* o,
               int64_t ldo, bool prefetch, int64_t row_bytes) {
  int64_t i = 0;
  for (; i + 4 <= mq; i += 4)
    axpy_block<4, kFull>(kl, ldp, pk + i, vk, vs, nj, o + i * ldo, ldo, prefetch && i == 0, row_bytes);
  const bool pf = prefetch && i == 0;
  float* oi = o + i * ldo;
  switch (mq - i) {
    case 3: axpy_block<3, kFull>(kl, ldp, pk + i, vk, vs, nj, oi, ldo, pf, row_bytes); break;
    case 2: axpy_block<2, kFull>(kl, ldp, pk + i, vk, vs, nj, oi, ldo, pf, row_bytes); break;
    case 1: axpy_block<1, kFull>(kl, ldp, pk + i, vk, vs, nj, oi, ldo, pf, row_bytes); break;
    default: break;
  }
}

template <typename E>
void axpy(int64_t kc, int64_t mq, const float* p, int64_t ldp, const E* v, int64_t vs, int64_t n, float* o,
          int64_t ldo) {
  const int64_t row_bytes = n * int64_t(sizeof(E));
  constexpr int64_t kCols = 8 * kAxpyVecs;
  for (int64_t k0 = 0; k0 < kc; k0 += kAxpyChunk) {
    const int64_t kl = kc - k0 < kAxpyChunk ? kc - k0 : kAxpyChunk;
    // Prefetch the next chunk's rows while the first block reads this one, if it exists.
    const bool more = k0 + kAxpyChunk + kl <= kc;
    const float* pk = p + k0 * ldp;
    const E* vk = v + k0 * vs;
    for (int64_t j0 = 0; j0 < n; j0 += kCols) {
      if (n - j0 >= kCols)
        axpy_rows<true>(kl, mq, pk, ldp, vk + j0, vs, n - j0, o + j0, ldo, more && j0 == 0, row_bytes);
      else
        axpy_rows<false>(kl, mq, pk, ldp, vk + j0, vs, n - j0, o + j0, ldo, more && j0 == 0, row_bytes);
    }
  }
}

}  // namespace

const RowOps rowops_avx2 = {"rowops_avx2", Isa::avx2, dot<float>, axpy<float>, dot<uint16_t>, axpy<uint16_t>,
                            f16_dot<dot<Half>>, f16_axpy<axpy<Half>>};

}  // namespace flashcore::cpu::ukernels
