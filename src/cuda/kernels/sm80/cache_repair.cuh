// The KV cache kernels' rows computed again (kvc_sm80.cuh: the forward kernel with kCache,
// and the key-split form), the hostile-value rules of the forward (parts/exact_rows.cuh,
// parts/nonfinite_v.cuh) on a cache: after the key loop, a row whose sum l is NaN (a NaN
// score, or a scaled maximum past kExactFrom) or whose O came out non-finite with a finite
// sum (V's NaN / Inf at a key the row does not see, in a tile the band or the cache length
// cuts: P V's 0 * NaN) is computed again exactly over the keys it sees of the CTA's run of
// key tiles, reading K / V through the cache's pages, and written again (O and lse, or the KV
// split's partial). A row that sees a NaN / Inf V is non-finite again, as the reference
// wants. No cleaning rerun: the kernels' loads stay as they are, and blocks without such rows
// pay the test after the key loop only.
#pragma once

#include <cstdint>

#include "cuda/kernels/params.hpp"
#include "cuda/kernels/sm80/load.cuh"
#include "cuda/kernels/sm80/repair.cuh"
#include "cuda/parts/epilogue.cuh"
#include "cuda/parts/exact_rows.cuh"
#include "cuda/parts/seq_mask.cuh"

namespace flashcore::cuda::sm80 {

// A zero row (the widest: hd256 of 16-bit elements; any element type reads it as zeros) for the keys whose page id is outside
// [0, num_pages): the tile loads read them as zeros, and so does the recompute.
__device__ __align__(16) static unsigned char g_zero_row[512];

// ExactKv's rows read through a cache (CacheKvRows: contiguous from the sequence's key 0,
// or paged), of the cache's element type T (16-bit, or e4m3).
template <typename T, int kBlockN>
struct CacheExactKv {
  CacheKvRows<T, kBlockN> rows;
  int d, dv;
  float c, v_scale;

  __device__ __forceinline__ const T* row(const T* base, int64_t ss, int64_t ps, int j) const {
    if (rows.pages == nullptr) return base + j * ss;
    const int s = rows.slot(j), id = __ldg(rows.pages + s);
    if (id < 0 || id >= rows.num_pages) return reinterpret_cast<const T*>(g_zero_row);
    return base + id * ps + int64_t(j - s * rows.page_size) * ss;
  }
  __device__ __forceinline__ const T* k_row(int j) const { return row(rows.k, rows.k_ss, rows.k_ps, j); }
  __device__ __forceinline__ const T* v_row(int j) const { return row(rows.v, rows.v_ss, rows.v_ps, j); }
};

// This lane's rows (bit r = 2 mi + half) to compute again: l NaN, or O non-finite with a
// finite sum (nonfinite_row_bits: the same in a row's quad). Before the epilogue.
template <int kMI, int kDF>
__device__ __forceinline__ uint32_t cache_fix_rows(const float (&acc)[kMI][kDF][4], const float (&l)[2 * kMI]) {
  uint32_t f = nonfinite_row_bits<kMI, kDF>(acc, l);
#pragma unroll
  for (int r = 0; r < 2 * kMI; ++r) f |= (isnan(l[r]) ? 1u : 0u) << r;
  return f;
}

// After the epilogue: this lane's rows with bit r of `flags` computed again and written
// again. Packed rows (shift = log2 of the query heads per KV head): packed row prow = row0 +
// 16 (r / 2) + 8 (r % 2) is query prow >> shift of head h + (prow & (G - 1)); the keys are
// those of [k_lo, k_hi) (this CTA's run of key tiles) that the row sees. split >= 0 with
// FwdParams::kv_splits > 1: the split's partial (unnormalized O, and m, mlo, l) for
// kv_combine.cu; else O and lse. T: q's and out's type, TC: the cache's; scale_log2 the
// scores' scale and o_scale the output's factor (an fp8 cache's dequantization folded in).
template <typename T, typename TC, int kMI, int kDF, int kBlockN>
__device__ __forceinline__ void repair_cache_rows(const FwdParams& p, const SeqInfo& seq, int b, int h, int shift,
                                                  int split, int k_lo, int k_hi, int row0, int lane, uint32_t flags,
                                                  float scale_log2, float o_scale) {
  const int t = lane % 4;
  const core::BandMask band = band_mask(p, seq);
  const CacheExactKv<TC, kBlockN> kv{CacheKvRows<TC, kBlockN>::make(p, b, h / p.group), p.d, p.dv, scale_log2,
                                     o_scale};
#pragma unroll 1
  for (int r = 0; r < 2 * kMI; ++r) {
    if (!((flags >> r) & 1u)) continue;
    const int prow = row0 + 16 * (r / 2) + 8 * (r % 2), i = prow >> shift, hq = h + (prow & ((1 << shift) - 1));
    if (i >= seq.sq) continue;
    const int kb = max(k_lo, int(band.key_begin(i, seq.sk))), ke = min(k_hi, int(band.key_end(i, seq.sk)));
    const ExactRow<T> row{
        static_cast<const T*>(p.q) + seq.bb * p.q_sb + (seq.q_row0 + i) * p.q_ss + int64_t(hq) * p.q_sh, kb, ke};
    float o[kDF][2], m, mlo, l;
    recompute_row<T, kDF>(o, m, mlo, l, row, kv, lane);
    if (p.kv_splits > 1) {
      const int64_t at = (int64_t(split) * p.o_rows() + int64_t(b) * p.sq + i) * p.heads + hq;
      float* po = p.part_o + at * p.dv;
#pragma unroll
      for (int df = 0; df < kDF; ++df) {
        const int col = df * 8 + 2 * t;
        if (col < p.dv) *reinterpret_cast<float2*>(po + col) = make_float2(o[df][0], o[df][1]);
      }
      if (t == 0) p.part_ml[at] = make_float4(m, mlo, l, 0.f);
    } else {
      T* orow = static_cast<T*>(p.o) + seq.bb * p.o_sb + (seq.q_row0 + i) * p.o_ss + int64_t(hq) * p.o_sh;
      float* lse = p.lse != nullptr ? p.lse + seq.bb * p.lse_sb + int64_t(hq) * p.lse_sh + seq.q_row0 + i : nullptr;
      store_row<T, kDF>([&](int df, int e) { return o[df][e]; }, m, mlo, l, orow, lse, p.dv, t, ptx::PackAs<T>{});
    }
  }
}

}  // namespace flashcore::cuda::sm80
