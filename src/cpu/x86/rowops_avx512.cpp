// AVX-512 row ops of the decode path (RowOps in ukernel.hpp): K and V rows read in place.
//
// dot, two forms:
// - few queries (mq <= kFewQueries): the head dim in the lanes. 16 / mq keys at a time, all
//   queries at once: 16 accumulators (key, query) of d/16 FMAs each (each key row chunk
//   loaded once for the mq queries, each query chunk once for the keys), then one
//   transposing reduction (30 shuffles, 15 adds) turns the 16 vectors into the 16 scores.
//   (Before, one query at a time: the key rows were loaded mq times, from L1.)
// - more queries: the queries in the lanes (16 per zmm, masked when mq % 16 != 0), 8 keys
//   at a time: per head-dim element one load of the transposed queries and 8 broadcast-
//   FMAs (an embedded {1to16} load each), i.e. d FMAs and 1.1 d loads per key whatever
//   the number of queries up to 16: ~72 cycles per key at d = 128. Measured at one query:
//   this form kept decode at ~70 ns per key with K and V in cache.
//
// axpy: the value columns in the lanes (no wasted lanes), up to 4 query rows x 4 zmm of
// accumulators, keys in L1-sized chunks so that each chunk of V rows is read from memory
// once and from L1 by the other row blocks.
//
// Both prefetch the rows they will read next: in BSHD tensors consecutive keys are a
// whole row of heads apart (8 KiB for 16 heads x 128 fp32), each on its own page, where
// the hardware prefetchers do not follow.
//
// Each is compiled for fp32 rows and for bf16 rows (dot_bf16, axpy_bf16: a bf16 KV cache or
// bf16 K and V read in place, widened in registers: 16 bf16 are the upper halves of 16 fp32,
// one zero-extension and one shift; without them the rows were first converted to an fp32
// copy, which took twice the time of the products in a bf16 decode), and for fp16 rows
// (dot_f16, axpy_f16: one VCVTPH2PS per 16 elements, exact as the bf16 widening is).
#include <immintrin.h>

#include <cstdint>

#include "cpu/simd/avx512.hpp"
#include "cpu/ukernels/row_forms.hpp"
#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::ukernels {
namespace {

namespace v = flashcore::cpu::avx512;

// Prefetch the `bytes` bytes of a row into L1 (locality 3, prefetcht0) or L2 (2, prefetcht1);
// prefetch never faults. __builtin_prefetch: GCC's _mm_prefetch wants its own enum type,
// Clang's is a macro over this builtin.
template <int kLocality = 3, typename E>
inline void prefetch_row(const E* row, int64_t bytes) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, kLocality);
}

// 16 row elements as fp32 (E: float, or uint16_t holding bf16 bits), all or the lanes of m.
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const float* p, __mmask16 m) { return v::load(p, m); }
inline __m512 widen_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
inline __m512 load16(const uint16_t* p) { return widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 load16(const uint16_t* p, __mmask16 m) { return widen_bf16(_mm256_maskz_loadu_epi16(m, p)); }
inline float elem(const float* p) { return *p; }
inline float elem(const uint16_t* p) { return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(int(uint32_t(*p) << 16)))); }
// IEEE fp16 rows: the element type Half (its bits), widened by VCVTPH2PS (exact).
inline __m512 load16(const Half* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 load16(const Half* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
inline float elem(const Half* p) {
  return _mm512_cvtss_f32(_mm512_cvtph_ps(_mm256_zextsi128_si256(_mm_cvtsi32_si128(int(p->bits)))));
}

constexpr int64_t kFewQueries = 8;
constexpr int kDotKeys = 8;
constexpr int64_t kDotAhead = 2 * kDotKeys;  // rows prefetched this many keys ahead
// dot_few's prefetch distance in keys: a decode tile of 8 kv heads holds 32 keys per head
// (a call's rows), so a distance of 32 never fired; 16 made the memory-bound B32 decode rows
// 1.12-1.17x faster (docs/results/cpu-decode-2026-12-02.md).
constexpr int64_t kFewAhead = 16;

template <int R, typename E>
inline void dot_keys(int64_t d, const E* x, int64_t xs, const float* y, int64_t mq, __mmask16 m, float* t,
                     int64_t ldt) {
  __m512 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t e = 0; e < d; ++e) {
    const __m512 ye = v::load(y + e * mq, m);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(elem(x + r * xs + e)), ye, acc[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) v::store(t + r * ldt, m, acc[r]);
}

// Lane r of the result = the sum of the 16 lanes of a[r].
inline __m512 reduce16(__m512 (&a)[16]) {
  __m512 b[8], c[4];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)  // per 128-bit block: [a0_0+a0_2, a1_0+a1_2, a0_1+a0_3, a1_1+a1_3]
    b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                         _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)  // per 128-bit block: the 4 keys' partial sums of that block
    c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // Blocks: add block pairs of c0/c1 and c2/c3, then the remaining pairs across them.
  const __m512 x01 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 x23 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(x01, x23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(x01, x23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Scores of kc keys for MQ queries (MQ <= kFewQueries), head dim in the lanes: G = 16 / MQ
// keys at a time, accumulator g MQ + i for (key g, query i), so that each key row's chunk is
// loaded once for all MQ queries (MQ query chunks and G key chunks per 16 FMAs; one query:
// 16 keys, as before); one transposing reduction then gives lane g MQ + i that score.
template <int MQ, typename E>
void dot_few(int64_t kc, int64_t d, const E* x, int64_t xs, const float* q, float* t, int64_t ldt) {
  constexpr int G = 16 / MQ, L = G * MQ;
  const int64_t row_bytes = d * int64_t(sizeof(E));
  const int64_t dfull = d / 16 * 16;
  const __mmask16 tail = v::lanes(d - dfull);
  alignas(64) int32_t lane_at[16];
  for (int r = 0; r < 16; ++r) lane_at[r] = r < L ? int32_t((r / MQ) * ldt + r % MQ) : 0;
  const __m512i idx = _mm512_load_si512(lane_at);
  for (int64_t k = 0; k < kc; k += G) {
    for (int64_t r = k + kFewAhead; r < k + kFewAhead + G && r < kc; ++r) prefetch_row(x + r * xs, row_bytes);
    const int64_t nk = kc - k < G ? kc - k : G;
    const E* xr[G];
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) xr[g] = x + (k + (g < nk ? g : nk - 1)) * xs;  // spare keys: a copy
    __m512 acc[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t c = 0; c < dfull; c += 16) {
      __m512 qc[MQ];
#pragma GCC unroll 8
      for (int i = 0; i < MQ; ++i) qc[i] = _mm512_loadu_ps(q + i * d + c);
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) {
        const __m512 xv = load16(xr[g] + c);
#pragma GCC unroll 8
        for (int i = 0; i < MQ; ++i) acc[g * MQ + i] = _mm512_fmadd_ps(xv, qc[i], acc[g * MQ + i]);
      }
    }
    if (tail != 0) {
      __m512 qc[MQ];
#pragma GCC unroll 8
      for (int i = 0; i < MQ; ++i) qc[i] = v::load(q + i * d + dfull, tail);
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) {
        const __m512 xv = load16(xr[g] + dfull, tail);
#pragma GCC unroll 8
        for (int i = 0; i < MQ; ++i) acc[g * MQ + i] = _mm512_fmadd_ps(xv, qc[i], acc[g * MQ + i]);
      }
    }
    const __m512 s = reduce16(acc);
    const __mmask16 keep = v::lanes(nk * MQ);
    if (ldt == MQ) v::store(t + k * ldt, keep, s);  // (lane g MQ + i is element g ldt + i)
    else _mm512_mask_i32scatter_ps(t + k * ldt, keep, idx, s, 4);
  }
}

template <typename E>
void dot(int64_t kc, int64_t d, const E* x, int64_t xs, const float* q, const float* y, int64_t mq, float* t,
         int64_t ldt) {
  const int64_t row_bytes = d * int64_t(sizeof(E));
  if (few_queries<kFewQueries>(mq, [&](auto c) { dot_few<decltype(c)::value>(kc, d, x, xs, q, t, ldt); })) return;
  for (int64_t i0 = 0; i0 < mq; i0 += 16) {
    const __mmask16 m = v::lanes(mq - i0);
    int64_t k = 0;
    for (; k + kDotKeys <= kc; k += kDotKeys) {
      if (i0 == 0)
        for (int64_t r = k + kDotAhead; r < k + kDotAhead + kDotKeys && r < kc; ++r)
          prefetch_row(x + r * xs, row_bytes);
      dot_keys<kDotKeys>(d, x + k * xs, xs, y + i0, mq, m, t + k * ldt + i0, ldt);
    }
    for (; k < kc; ++k) dot_keys<1>(d, x + k * xs, xs, y + i0, mq, m, t + k * ldt + i0, ldt);
  }
}

constexpr int64_t kAxpyChunk = 16;  // keys per L1 chunk of V rows (and the prefetch distance)
constexpr int kAxpyVecs = 4;        // zmm of value columns per accumulator row

template <int R, typename E>
inline void axpy_block(int64_t kc, int64_t ldp, const float* p, const E* v, int64_t vs, int64_t n, float* o,
                       int64_t ldo, bool prefetch, int64_t row_bytes) {
  __mmask16 m[kAxpyVecs];
  __m512 acc[R][kAxpyVecs];
#pragma GCC unroll 4
  for (int c = 0; c < kAxpyVecs; ++c) m[c] = n > 16 * c ? v::lanes(n - 16 * c) : __mmask16(0);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < kAxpyVecs; ++c) acc[r][c] = v::load(o + r * ldo + 16 * c, m[c]);
  for (int64_t k = 0; k < kc; ++k) {
    // Into L2: the next chunk's rows (16 rows of 1 KiB at d = 256) would evict much of this
    // chunk's from L1, which the other row blocks read again.
    if (prefetch) prefetch_row<2>(v + (k + kAxpyChunk) * vs, row_bytes);
    __m512 vk[kAxpyVecs];
#pragma GCC unroll 4
    for (int c = 0; c < kAxpyVecs; ++c) vk[c] = load16(v + k * vs + 16 * c, m[c]);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 pk = _mm512_set1_ps(p[k * ldp + r]);
#pragma GCC unroll 4
      for (int c = 0; c < kAxpyVecs; ++c) acc[r][c] = _mm512_fmadd_ps(pk, vk[c], acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < kAxpyVecs; ++c) v::store(o + r * ldo + 16 * c, m[c], acc[r][c]);
}

template <typename E>
void axpy(int64_t kc, int64_t mq, const float* p, int64_t ldp, const E* v, int64_t vs, int64_t n, float* o,
          int64_t ldo) {
  const int64_t row_bytes = n * int64_t(sizeof(E));
  for (int64_t k0 = 0; k0 < kc; k0 += kAxpyChunk) {
    const int64_t kl = kc - k0 < kAxpyChunk ? kc - k0 : kAxpyChunk;
    // Prefetch the next chunk's rows while the first block reads this one, if it exists.
    const bool more = k0 + kAxpyChunk + kl <= kc;
    const float* pk = p + k0 * ldp;
    const E* vk = v + k0 * vs;
    for (int64_t j0 = 0; j0 < n; j0 += 16 * kAxpyVecs) {
      const int64_t nj = n - j0;
      int64_t i = 0;
      for (; i + 4 <= mq; i += 4)
        axpy_block<4>(kl, ldp, pk + i, vk + j0, vs, nj, o + i * ldo + j0, ldo,
                      more && i == 0 && j0 == 0, row_bytes);
      const bool pf = more && i == 0 && j0 == 0;
      float* oi = o + i * ldo + j0;
      switch (mq - i) {
        case 3: axpy_block<3>(kl, ldp, pk + i, vk + j0, vs, nj, oi, ldo, pf, row_bytes); break;
        case 2: axpy_block<2>(kl, ldp, pk + i, vk + j0, vs, nj, oi, ldo, pf, row_bytes); break;
        case 1: axpy_block<1>(kl, ldp, pk + i, vk + j0, vs, nj, oi, ldo, pf, row_bytes); break;
        default: break;
      }
    }
  }
}

}  // namespace

const RowOps rowops_avx512 = {"rowops_avx512", Isa::avx512f, dot<float>, axpy<float>, dot<uint16_t>, axpy<uint16_t>,
                              f16_dot<dot<Half>>, f16_axpy<axpy<Half>>};

}  // namespace flashcore::cpu::ukernels
