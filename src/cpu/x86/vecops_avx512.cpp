// AVX-512 softmax vector ops (VecOps in ukernel.hpp) over key-major tiles t[k * ldt + i].
//
// Each op walks the query axis in chunks of up to 4 zmm (64 queries) and runs over the
// keys inside the chunk, so the per-query state (running max, c*m, row sums) stays in
// registers for the whole tile and 4 independent exp2 chains hide the FMA latency.
// Chunks shorter than a vector (mq is a multiple of MR, e.g. 12 or 14 in softmax_v) use
// masked loads/stores; masked-off lanes are never stored.
#include <immintrin.h>

#include <cstdint>

#include "cpu/simd/avx512.hpp"
#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::ukernels {
namespace {

namespace v = flashcore::cpu::avx512;

template <int NV>
void col_max_chunk(int64_t kc, int64_t n, const float* t, int64_t ldt, float* mx) {
  __mmask16 m[NV];
  __m512 acc[NV];
  for (int j = 0; j < NV; ++j) {
    m[j] = v::lanes(n - 16 * j);
    acc[j] = v::load(mx + 16 * j, m[j]);
  }
  for (int64_t k = 0; k < kc; ++k, t += ldt)
    for (int j = 0; j < NV; ++j) acc[j] = _mm512_max_ps(acc[j], v::load(t + 16 * j, m[j]));
  for (int j = 0; j < NV; ++j) v::store(mx + 16 * j, m[j], acc[j]);
}

void col_max(int64_t kc, int64_t mq, const float* t, int64_t ldt, float* mx) {
  int64_t i = 0;
  for (; i + 64 <= mq; i += 64) col_max_chunk<4>(kc, 64, t + i, ldt, mx + i);
  for (; i < mq; i += 16) col_max_chunk<1>(kc, mq - i, t + i, ldt, mx + i);
}

// p = exp2(c*t - cm) stored as DST (0 f32, 1 f16, 2 bf16); sum += p as stored, so the
// normalization divides by exactly what the GEMM multiplied.
template <int NV, bool kFast, int DST>
void exp2_pack_chunk(int64_t kc, int64_t n, const float* t, int64_t ldt, float c,
                     const float* cm, void* dst, int64_t ldd, float* sum) {
  __mmask16 m[NV];
  __m512 cmv[NV], sv[NV];
  const __m512 cv = _mm512_set1_ps(c);
  for (int j = 0; j < NV; ++j) {
    m[j] = v::lanes(n - 16 * j);
    cmv[j] = v::load(cm + 16 * j, m[j]);
    sv[j] = v::load(sum + 16 * j, m[j]);
  }
  for (int64_t k = 0; k < kc; ++k, t += ldt) {
    for (int j = 0; j < NV; ++j) {
      // c*t - c*m: <= the online strategy's rescale slack, -inf for a masked score.
      const __m512 x = _mm512_fmsub_ps(cv, v::load(t + 16 * j, m[j]), cmv[j]);
      const __m512 p = kFast ? v::exp2_fast(x) : DST == 0 ? v::exp2_exact(x) : v::exp2_p16(x);
      if constexpr (DST == 0) {
        v::store(static_cast<float*>(dst) + k * ldd + 16 * j, m[j], p);
        sv[j] = _mm512_add_ps(sv[j], p);
      } else if constexpr (DST == 1) {
        const __m256i h = v::to_f16(p);
        _mm256_mask_storeu_epi16(static_cast<uint16_t*>(dst) + k * ldd + 16 * j, m[j], h);
        sv[j] = _mm512_add_ps(sv[j], v::from_f16(h));
      } else {
        const __m512i b = v::to_bf16_rounded(p);
        _mm256_mask_storeu_epi16(static_cast<uint16_t*>(dst) + k * ldd + 16 * j, m[j],
                                 v::narrow_u16(b));
        sv[j] = _mm512_add_ps(sv[j], v::bf16_value(b));
      }
    }
  }
  for (int j = 0; j < NV; ++j) v::store(sum + 16 * j, m[j], sv[j]);
}

// fp16 P in k pairs (the AVX512-FP16 kernel's A layout): pair row r of query i is the
// 32-bit word d32[r * ldd + i] holding keys 2r (low half) and 2r + 1; an odd last key gets a
// zero partner. kMode: 0 exp2 (exact for 16-bit P), 1 exp2_fast, 2 t itself (pack: any
// fp32 value, rounded to nearest even; cm and sum unused).
template <int kMode>
void exp2_pack_f16_pairs(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c,
                         const float* cm, void* dst, int64_t ldd, float* sum) {
  const __m512 cv = _mm512_set1_ps(c);
  uint32_t* d32 = static_cast<uint32_t*>(dst);
  auto prob = [&](const float* row, __mmask16 m, __m512 cmv) {
    if constexpr (kMode == 2) return v::to_f16(v::load(row, m));
    const __m512 x = _mm512_fmsub_ps(cv, v::load(row, m), cmv);
    return v::to_f16(kMode == 1 ? v::exp2_fast(x) : v::exp2_p16(x));
  };
  for (int64_t i = 0; i < mq; i += 16) {
    const __mmask16 m = v::lanes(mq - i);
    const __m512 cmv = kMode == 2 ? _mm512_setzero_ps() : v::load(cm + i, m);
    __m512 sv = kMode == 2 ? _mm512_setzero_ps() : v::load(sum + i, m);
    for (int64_t k = 0; k < kc; k += 2) {
      const __m256i h0 = prob(t + k * ldt + i, m, cmv);
      const __m256i h1 = k + 1 < kc ? prob(t + (k + 1) * ldt + i, m, cmv) : _mm256_setzero_si256();
      const __m512i w = _mm512_or_si512(_mm512_cvtepu16_epi32(h0),
                                        _mm512_slli_epi32(_mm512_cvtepu16_epi32(h1), 16));
      _mm512_mask_storeu_epi32(d32 + (k / 2) * ldd + i, m, w);
      if constexpr (kMode != 2) sv = _mm512_add_ps(sv, _mm512_add_ps(v::from_f16(h0), v::from_f16(h1)));
    }
    if constexpr (kMode != 2) v::store(sum + i, m, sv);
  }
}

template <bool kFast, int DST>
void exp2_pack_t(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c, const float* cm,
                 void* dst, int64_t ldd, float* sum) {
  const int64_t es = DST == 0 ? 4 : 2;
  char* d = static_cast<char*>(dst);
  int64_t i = 0;
  for (; i + 64 <= mq; i += 64)
    exp2_pack_chunk<4, kFast, DST>(kc, 64, t + i, ldt, c, cm + i, d + i * es, ldd, sum + i);
  for (; i < mq; i += 16)
    exp2_pack_chunk<1, kFast, DST>(kc, mq - i, t + i, ldt, c, cm + i, d + i * es, ldd, sum + i);
}

template <bool kFast>
void exp2_pack_mode(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c,
                    const float* cm, void* dst, int64_t ldd, DType dst_type, float* sum) {
  switch (dst_type) {
    case DType::f16: exp2_pack_t<kFast, 1>(kc, mq, t, ldt, c, cm, dst, ldd, sum); break;
    case DType::bf16: exp2_pack_t<kFast, 2>(kc, mq, t, ldt, c, cm, dst, ldd, sum); break;
    default: exp2_pack_t<kFast, 0>(kc, mq, t, ldt, c, cm, dst, ldd, sum); break;
  }
}

void exp2_pack(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c, const float* cm,
               void* dst, int64_t ldd, DType dst_type, Layout layout, Exp2Mode mode,
               float* sum) {
  if (layout == Layout::kpairs && dst_type == DType::f16) {
    if (mode == Exp2Mode::fast)
      exp2_pack_f16_pairs<1>(kc, mq, t, ldt, c, cm, dst, ldd, sum);
    else
      exp2_pack_f16_pairs<0>(kc, mq, t, ldt, c, cm, dst, ldd, sum);
  } else if (layout != Layout::kmajor) {
    // The bf16 kernels' k-pair and row layouts have their own ops (vecops_avx512bf16.cpp);
    // the portable ones cover anything else.
    ukernels::vecops_generic.exp2_pack(kc, mq, t, ldt, c, cm, dst, ldd, dst_type, layout, mode,
                                       sum);
  } else if (mode == Exp2Mode::fast) {
    exp2_pack_mode<true>(kc, mq, t, ldt, c, cm, dst, ldd, dst_type, sum);
  } else {
    exp2_pack_mode<false>(kc, mq, t, ldt, c, cm, dst, ldd, dst_type, sum);
  }
}

void scale_rows(int64_t mq, int64_t n, float* o, int64_t ld, const float* alpha) {
  for (int64_t i = 0; i < mq; ++i) {
    const __m512 a = _mm512_set1_ps(alpha[i]);
    float* row = o + i * ld;
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = v::lanes(n - j);
      v::store(row + j, m, _mm512_mul_ps(v::load(row + j, m), a));
    }
  }
}

// vcvtph2ps (AVX-512F) 16 values at a time.
void add_f16_tile(int64_t mr, int64_t nr, const uint16_t* tile, float* c, int64_t ldc, int accumulate) {
  for (int64_t i = 0; i < mr; ++i, tile += nr, c += ldc)
    for (int64_t j = 0; j < nr; j += 16) {
      __m512 x = v::from_f16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + j)));
      if (accumulate) x = _mm512_add_ps(x, _mm512_loadu_ps(c + j));
      _mm512_storeu_ps(c + j, x);
    }
}

// k pairs by vpermt2w: rows 2p and 2p+1 (32 fp16 each per step) interleaved into the 64
// values of pair row p; other layouts and column tails by the portable loop.
void f16_tile_as(int64_t mr, int64_t nr, const uint16_t* tile, uint16_t* dst, int64_t ld, Layout layout) {
  if (layout != Layout::kpairs || nr % 32 != 0) {
    ukernels::vecops_generic.f16_tile_as(mr, nr, tile, dst, ld, layout);
    return;
  }
  // Word w of the result: row 2p's word w / 2 (index w / 2) or row 2p+1's (32 + w / 2).
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                      39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  for (int64_t i = 0; i < mr; i += 2, tile += 2 * nr, dst += 2 * ld)
    for (int64_t j = 0; j < nr; j += 32) {
      const __m512i a = _mm512_loadu_si512(tile + j), b = _mm512_loadu_si512(tile + nr + j);
      _mm512_storeu_si512(dst + 2 * j, _mm512_permutex2var_epi16(a, lo, b));
      _mm512_storeu_si512(dst + 2 * j + 32, _mm512_permutex2var_epi16(a, hi, b));
    }
}

// 16 lanes at a time: f16 by vcvtps2ph, bf16 by the integer rounding of core::f32_to_bf16
// (NaN kept quiet the same way); other dtypes by the portable ops.
void store_row(const float* row, int64_t n, float scale, void* dst, DType dt) {
  const __m512 s = _mm512_set1_ps(scale);
  if (dt == DType::f32) {
    float* d = static_cast<float*>(dst);
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = v::lanes(n - j);
      v::store(d + j, m, _mm512_mul_ps(v::load(row + j, m), s));
    }
  } else if (dt == DType::f16 || dt == DType::bf16) {
    uint16_t* d = static_cast<uint16_t*>(dst);
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = v::lanes(n - j);
      const __m512 x = _mm512_mul_ps(v::load(row + j, m), s);
      __m256i h;
      if (dt == DType::f16) {
        h = v::to_f16(x);
      } else {
        const __m512i u = _mm512_castps_si512(x);
        const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
        h = v::narrow_u16(_mm512_mask_mov_epi32(v::to_bf16_rounded(x), nan, quiet));
      }
      _mm256_mask_storeu_epi16(d + j, m, h);
    }
  } else {
    ukernels::vecops_generic.store_row(row, n, scale, dst, dt);
  }
}

// fp16 k pairs vectorized (gemm_chain's intermediate for the AVX512-FP16 kernel); the
// portable loop for the rest.
void pack(int64_t kc, int64_t mq, const float* t, int64_t ldt, void* dst, int64_t ldd, DType dst_type,
          Layout layout) {
  if (layout == Layout::kpairs && dst_type == DType::f16)
    exp2_pack_f16_pairs<2>(kc, mq, t, ldt, 0.0f, nullptr, dst, ldd, nullptr);
  else
    ukernels::vecops_generic.pack(kc, mq, t, ldt, dst, ldd, dst_type, layout);
}

}  // namespace

const VecOps vecops_avx512 = {"vecops_avx512", Isa::avx512f, col_max, exp2_pack, pack, scale_rows, add_f16_tile,
                              f16_tile_as, store_row, nullptr, nullptr};
// AVX512-FP16 CPUs have AVX-512F: the same ops serve the f16 kernels.
const VecOps vecops_avx512fp16 = {"vecops_avx512fp16", Isa::avx512fp16, col_max, exp2_pack, pack,
                                  scale_rows, add_f16_tile, f16_tile_as, store_row, nullptr, nullptr};

}  // namespace flashcore::cpu::ukernels
