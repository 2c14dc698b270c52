// Softmax vector ops for the bf16 kernels (AVX512-BF16, AMX): exp2_pack into their P
// layouts with vcvtne2ps2bf16, which rounds two fp32 vectors to 32 bf16 (nearest even) in
// one instruction where the AVX-512F path (vecops_avx512.cpp) spends five integer ops per
// vector. Every other case (k-major P, other dtypes, col_max, scale_rows) forwards to the
// AVX-512F ops. Compiled with -mavx512bf16; dispatch pairs these ops with the bf16 kernels
// only (their ISAs imply AVX-512F and AVX512-BF16, dispatch.cpp).
//
// vcvtne2ps2bf16 treats fp32 subnormals as zero and never produces a bf16 subnormal:
// probabilities under 2^-126 are stored as 0 (and summed as 0), which changes a row sum by
// less than 2^-126 per key.
#include <immintrin.h>

#include <cstdint>

#include "cpu/simd/avx512.hpp"
#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::ukernels {
namespace {

namespace v = flashcore::cpu::avx512;

// Lane i of the result: bf16(p0[i]) in the low half, bf16(p1[i]) in the high half (the pair
// word of keys k, k+1 of query i). vcvtne2ps2bf16 puts p0's 16 values below p1's; vpermw
// interleaves them.
inline __m512i pair_words(__m512 p0, __m512 p1, __m512i interleave) {
  const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(p1, p0);
  return _mm512_permutexvar_epi16(interleave, packed);
}
inline __m512i interleave_index() {
  alignas(64) int16_t idx[32];
  for (int i = 0; i < 16; ++i) {
    idx[2 * i] = int16_t(i);
    idx[2 * i + 1] = int16_t(16 + i);
  }
  return _mm512_load_si512(idx);
}
// sum + the two values a pair word stands for, as stored: one vdpbf16ps against ones
// (products by 1 are exact; it flushes bf16 subnormals, which vcvtne2ps2bf16 never makes).
inline __m512 add_pair(__m512 sum, __m512i w) {
  return _mm512_dpbf16_ps(sum, (__m512bh)w, (__m512bh)_mm512_set1_epi16(0x3F80));
}

// kMode: 0 exp2 (exact for bf16 P), 1 exp2_fast, 2 t itself (pack: no exponential, no sums).
template <int kMode>
inline __m512 prob(__m512 cv, const float* t, __mmask16 m, __m512 cmv) {
  if constexpr (kMode == 2) return v::load(t, m);
  const __m512 x = _mm512_fmsub_ps(cv, v::load(t, m), cmv);
  return kMode == 1 ? v::exp2_fast(x) : v::exp2_pbf16(x);  // P is bf16 (avx512.hpp)
}

// k pairs: pair row r of query i is the 32-bit word d32[r * ldd + i].
template <int kMode>
void exp2_pack_pairs(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c,
                     const float* cm, void* dst, int64_t ldd, float* sum) {
  const __m512 cv = _mm512_set1_ps(c);
  const __m512i il = interleave_index();
  uint32_t* d32 = static_cast<uint32_t*>(dst);
  for (int64_t i = 0; i < mq; i += 16) {
    const __mmask16 m = v::lanes(mq - i);
    const __m512 cmv = kMode == 2 ? _mm512_setzero_ps() : v::load(cm + i, m);
    __m512 sv = kMode == 2 ? _mm512_setzero_ps() : v::load(sum + i, m);
    for (int64_t k = 0; k < kc; k += 2) {
      const __m512 p0 = prob<kMode>(cv, t + k * ldt + i, m, cmv);
      // the zero partner of an odd last key
      const __m512 p1 = k + 1 < kc ? prob<kMode>(cv, t + (k + 1) * ldt + i, m, cmv)
                                   : _mm512_setzero_ps();
      const __m512i w = pair_words(p0, p1, il);
      _mm512_mask_storeu_epi32(d32 + (k / 2) * ldd + i, m, w);
      if constexpr (kMode != 2) sv = add_pair(sv, w);
    }
    if constexpr (kMode != 2) v::store(sum + i, m, sv);
  }
}

// 16 x 16 transpose of 32-bit elements: out[j] lane a = in[a] lane j (in-lane unpacks, then
// 128-bit lane shuffles: 64 shuffles for 256 words).
inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16], u[16], w[16];
  for (int j = 0; j < 8; ++j) {
    t[2 * j] = _mm512_unpacklo_epi32(r[2 * j], r[2 * j + 1]);
    t[2 * j + 1] = _mm512_unpackhi_epi32(r[2 * j], r[2 * j + 1]);
  }
  // u[4g + c], 128-bit lane L: rows 4g..4g+3 of column 4L + c.
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  // w[8h + c]: rows 8h..8h+7 of columns c, 8+c; w[8h + 4 + c]: columns 4+c, 12+c.
  for (int h = 0; h < 2; ++h)
    for (int c = 0; c < 4; ++c) {
      w[8 * h + c] = _mm512_shuffle_i32x4(u[8 * h + c], u[8 * h + 4 + c], 0x88);
      w[8 * h + 4 + c] = _mm512_shuffle_i32x4(u[8 * h + c], u[8 * h + 4 + c], 0xdd);
    }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm512_shuffle_i32x4(w[c], w[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_i32x4(w[c], w[8 + c], 0xdd);
    r[4 + c] = _mm512_shuffle_i32x4(w[4 + c], w[12 + c], 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(w[4 + c], w[12 + c], 0xdd);
  }
}

// w[r] lane e holds the pair word of row pair r for column e: stored transposed, column e's
// 16 pair words (32 bf16 of the rows, in order) as one 64-byte row at d + e * ld.
inline void store_transposed(__m512i (&w)[16], uint16_t* d, int64_t ld) {
  transpose16(w);
  for (int e = 0; e < 16; ++e) _mm512_storeu_si512(d + e * ld, w[e]);
}

// Rows (AMX's A tile; mq % 16 == 0, kc % 32 == 0): 16 queries x 32 keys as 16 pair words
// per query lane, transposed so each query's 32 keys are one 64-byte store.
template <int kMode>
void exp2_pack_rows(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c,
                    const float* cm, void* dst, int64_t ldd, float* sum) {
  const __m512 cv = _mm512_set1_ps(c);
  const __m512i il = interleave_index();
  const __mmask16 all = 0xFFFF;
  uint16_t* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < mq; i += 16) {
    const __m512 cmv = kMode == 2 ? _mm512_setzero_ps() : _mm512_loadu_ps(cm + i);
    __m512 sv = kMode == 2 ? _mm512_setzero_ps() : _mm512_loadu_ps(sum + i);
    for (int64_t k0 = 0; k0 < kc; k0 += 32) {
      __m512i w[16];
      for (int r = 0; r < 16; ++r) {
        const float* row = t + (k0 + 2 * r) * ldt + i;
        w[r] = pair_words(prob<kMode>(cv, row, all, cmv), prob<kMode>(cv, row + ldt, all, cmv), il);
        if constexpr (kMode != 2) sv = add_pair(sv, w[r]);
      }
      store_transposed(w, d + i * ldd + k0, ldd);
    }
    if constexpr (kMode != 2) _mm512_storeu_ps(sum + i, sv);
  }
}

// The bf16 P layouts written here (k pairs; AMX rows when mq % 16 == 0 and kc % 32 == 0) in
// mode kMode; false for any other case, which the caller forwards to the AVX-512F ops.
template <int kMode>
bool pack_bf16(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c, const float* cm, void* dst,
               int64_t ldd, DType dst_type, Layout layout, float* sum) {
  if (dst_type != DType::bf16) return false;
  if (layout == Layout::kpairs) {
    exp2_pack_pairs<kMode>(kc, mq, t, ldt, c, cm, dst, ldd, sum);
    return true;
  }
  if (layout == Layout::rows && mq % 16 == 0 && kc % 32 == 0) {
    exp2_pack_rows<kMode>(kc, mq, t, ldt, c, cm, dst, ldd, sum);
    return true;
  }
  return false;
}

// The backward's tiles ([query][key] fp32, 32 queries x 16 keys per block): row pairs
// (2r, 2r + 1) become pair words of one key per lane, transposed as in exp2_pack_rows so that
// each key's 32 queries are one 64-byte store of the A(k = query, i = key) operand.

// Lanes e of a 16-key block whose key j0 + e lies in [lo, hi) (bounds relative to j0).
inline __mmask16 key_lanes(int64_t lo, int64_t hi) {
  return v::lanes(hi > 0 ? hi : 0) & ~v::lanes(lo > 0 ? lo : 0);
}

template <int kMode>  // 0: exp2_pbf16 (P is bf16), 1: exp2_fast
void bwd_probs_rows(int64_t m, int64_t n, float* s, int64_t ld, float c, const float* sub, const int64_t* lo,
                    const int64_t* hi, void* pt, int64_t ldp) {
  const __m512 cv = _mm512_set1_ps(c);
  const __m512i il = interleave_index();
  uint16_t* d = static_cast<uint16_t*>(pt);
  for (int64_t q0 = 0; q0 < m; q0 += 32)
    for (int64_t j = 0; j < n; j += 16) {
      __m512i w[16];
      for (int r = 0; r < 16; ++r) {
        __m512 p[2];
        for (int h = 0; h < 2; ++h) {
          const int64_t q = q0 + 2 * r + h;
          float* row = s + q * ld + j;
          const __m512 x = _mm512_fmsub_ps(cv, _mm512_loadu_ps(row), _mm512_set1_ps(sub[q]));
          // masked lanes: exactly 0 whatever the score there (NaN and Inf included)
          p[h] = _mm512_maskz_mov_ps(key_lanes(lo[q] - j, hi[q] - j), kMode == 1 ? v::exp2_fast(x) : v::exp2_pbf16(x));
          _mm512_storeu_ps(row, p[h]);
        }
        w[r] = pair_words(p[0], p[1], il);
      }
      store_transposed(w, d + j * ldp + q0, ldp);
    }
}

void bwd_probs(int64_t m, int64_t n, float* s, int64_t ld, float c, const float* sub, const int64_t* lo,
               const int64_t* hi, Exp2Mode mode, void* pt, int64_t ldp) {
  if (mode == Exp2Mode::fast)
    bwd_probs_rows<1>(m, n, s, ld, c, sub, lo, hi, pt, ldp);
  else
    bwd_probs_rows<0>(m, n, s, ld, c, sub, lo, hi, pt, ldp);
}

void bwd_dscores(int64_t m, int64_t n, const float* p, const float* dp, int64_t ld, const float* dd, void* dst,
                 int64_t ldt, void* dsr, int64_t ldr) {
  const __m512i il = interleave_index();
  uint16_t* dt = static_cast<uint16_t*>(dst);
  uint16_t* dr = static_cast<uint16_t*>(dsr);
  for (int64_t q0 = 0; q0 < m; q0 += 32)
    for (int64_t j = 0; j < n; j += 16) {
      __m512i w[16];
      for (int r = 0; r < 16; ++r) {
        const int64_t q = q0 + 2 * r;
        const float* p0 = p + q * ld + j;
        const float* g0 = dp + q * ld + j;
        const __m512 ds0 =
            _mm512_mul_ps(_mm512_loadu_ps(p0), _mm512_sub_ps(_mm512_loadu_ps(g0), _mm512_set1_ps(dd[q])));
        const __m512 ds1 =
            _mm512_mul_ps(_mm512_loadu_ps(p0 + ld), _mm512_sub_ps(_mm512_loadu_ps(g0 + ld), _mm512_set1_ps(dd[q + 1])));
        // row q's 16 keys in the low half, row q + 1's in the high half
        const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(ds1, ds0);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dr + q * ldr + j), _mm512_castsi512_si256(packed));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dr + (q + 1) * ldr + j), _mm512_extracti64x4_epi64(packed, 1));
        w[r] = _mm512_permutexvar_epi16(il, packed);
      }
      store_transposed(w, dt + j * ldt + q0, ldt);
    }
}

void exp2_pack(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c, const float* cm,
               void* dst, int64_t ldd, DType dst_type, Layout layout, Exp2Mode mode,
               float* sum) {
  const bool done = mode == Exp2Mode::fast ? pack_bf16<1>(kc, mq, t, ldt, c, cm, dst, ldd, dst_type, layout, sum)
                                           : pack_bf16<0>(kc, mq, t, ldt, c, cm, dst, ldd, dst_type, layout, sum);
  if (!done) vecops_avx512.exp2_pack(kc, mq, t, ldt, c, cm, dst, ldd, dst_type, layout, mode, sum);
}

// The same loops without the exponential (gemm_chain's intermediate as the bf16 kernels' A).
void pack(int64_t kc, int64_t mq, const float* t, int64_t ldt, void* dst, int64_t ldd, DType dst_type,
          Layout layout) {
  if (!pack_bf16<2>(kc, mq, t, ldt, 0.0f, nullptr, dst, ldd, dst_type, layout, nullptr))
    vecops_avx512.pack(kc, mq, t, ldt, dst, ldd, dst_type, layout);
}

void col_max(int64_t kc, int64_t mq, const float* t, int64_t ldt, float* mx) {
  vecops_avx512.col_max(kc, mq, t, ldt, mx);
}
void scale_rows(int64_t mq, int64_t n, float* o, int64_t ld, const float* alpha) {
  vecops_avx512.scale_rows(mq, n, o, ld, alpha);
}

void add_f16_tile(int64_t mr, int64_t nr, const uint16_t* tile, float* c, int64_t ldc, int accumulate) {
  vecops_avx512.add_f16_tile(mr, nr, tile, c, ldc, accumulate);
}
void f16_tile_as(int64_t mr, int64_t nr, const uint16_t* tile, uint16_t* dst, int64_t ld, Layout layout) {
  vecops_avx512.f16_tile_as(mr, nr, tile, dst, ld, layout);
}
void store_row(const float* row, int64_t n, float scale, void* dst, DType dt) {
  vecops_avx512.store_row(row, n, scale, dst, dt);
}

}  // namespace

const VecOps vecops_avx512bf16 = {"vecops_avx512bf16", Isa::avx512bf16, col_max, exp2_pack, pack,
                                  scale_rows, add_f16_tile, f16_tile_as, store_row, nullptr, nullptr};
const VecOps vecops_amx = {"vecops_amx", Isa::amx_bf16, col_max, exp2_pack, pack, scale_rows, add_f16_tile,
                           f16_tile_as, store_row, bwd_probs, bwd_dscores};

}  // namespace flashcore::cpu::ukernels
