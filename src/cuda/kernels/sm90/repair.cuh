// The sm90 forward's rare second look at an item, once its output is written (the key loop
// and the epilogue keep no state for it: registers), where Mainloop::fix_flags found a
// reason in one of the warp's rows:
//
// - Rows with l = NaN (a NaN score, or a max past kExactFrom: parts/softmax.cuh), and
//   (16-bit) rows whose O came out non-finite (a hidden key's NaN / Inf V through P V's
//   0 * NaN, or a NaN / Inf V the row sees: bad_keys.cuh), computed again exactly over the
//   keys they see (parts/exact_rows.cuh) and written again: O and lse, or the split's
//   partial row and (m, mlo, l).
// - fp8: V's NaN at keys the V^T makers had cleaned before P V ("_vt": its transposer, the
//   cut tiles; other fp8: every tile, by the pre-pass or the fused transposer) added to the
//   written O of the other rows that see those keys (parts/nonfinite_v.cuh); not to rows
//   past the sequence or with no finite score (l = 0, O = 0).
//
// The item's geometry and factors are found again here. Each lane writes its own fragments'
// elements, as the register epilogue and the split's stores do; where the epilogue staged
// O, its stores are complete before this runs (Epilogue::store_staged).
#pragma once

#include <cstdint>

#include "cuda/kernels/params.hpp"
#include "cuda/kernels/sm90/bad_keys.cuh"
#include "cuda/kernels/sm90/mainloop.cuh"
#include "cuda/kernels/sm90/scheduler.cuh"
#include "cuda/parts/epilogue.cuh"
#include "cuda/parts/exact_rows.cuh"
#include "cuda/parts/nonfinite_v.cuh"
#include "cuda/parts/score_mod.cuh"

namespace flashcore::cuda::sm90 {

template <typename T, class Tr>
struct RowRepair {
  static constexpr int kDF = Tr::kHeadDim / 8;
  using O = std::conditional_t<Tr::kFp8, __half, T>;  // as Epilogue's
  SmemLayout<Tr> s;
  int cw, warp, lane;

  template <class Sched>
  __device__ __forceinline__ void run(const FwdParams& p, const Sched& sched, const WorkItem& wi,
                                      uint32_t flags) const {
    if (!fix_needed(flags)) return;
    const WorkItem w{ptx::opaque(wi.m0), ptx::opaque(wi.h), ptx::opaque(wi.b)};
    const SeqInfo seq = seq_info(p, w.b);
    const TileRange tiles = sched.item_tiles(p, w, seq);
    const core::BandMask band = band_mask(p, seq);
    const int t = lane % 4, k_lo = tiles.lo * Tr::kBlockN, k_hi = min(tiles.hi * Tr::kBlockN, seq.sk);
    const int row0 = w.m0 + 64 * cw + 16 * warp + lane / 4, shift = sched.shift, hk = sched.kv_head(p, w);
    const T* k0 = static_cast<const T*>(p.k) + seq.bb * p.k_sb + seq.k_row0 * p.k_ss + int64_t(hk) * p.k_sh;
    const T* v0 = static_cast<const T*>(p.v) + seq.bb * p.v_sb + seq.k_row0 * p.v_ss + int64_t(hk) * p.v_sh;
    float c = p.scale_log2, v_scale = Tr::kFp8 ? p.o_scale : 1.f;
    Mainloop<T, Tr, false>::item_factors(p, seq, hk, c, v_scale);
    const bool split = Sched::kSplits && sched.ns > 1;
    const bool bf16 = Tr::kFp8 ? p.out_bf16 : std::is_same_v<T, __nv_bfloat16>;
    // One row at a time (registers): row half's keys [kb, ke), and where it is written: its
    // first element's offset in O, or in part_o (split), and its lse or part_ml index.
#pragma unroll 1
    for (int half = 0; half < 2; ++half) {
      const int prow = row0 + 8 * half, i = prow >> shift;
      const bool exact = (flags >> half) & 1u;
      if (i >= seq.sq || !(exact || ((flags & kFixTagged) && !((flags >> (2 + half)) & 1u)))) continue;
      const int hq = shift > 0 ? (w.h << shift) | (prow & ((1 << shift) - 1)) : w.h;
      const int kb = max(k_lo, int(band.key_begin(i, seq.sk))), ke = min(k_hi, int(band.key_end(i, seq.sk)));
      const int64_t ml = split ? ((Sched::kSplits ? sched.split_j : 0) * p.o_rows() + seq.bb * p.sq + seq.q_row0 + i) *
                                         p.heads + hq
                               : seq.bb * p.lse_sb + int64_t(hq) * p.lse_sh + seq.q_row0 + i;
      const int64_t at = split ? ml * p.dv : seq.bb * p.o_sb + (seq.q_row0 + i) * p.o_ss + int64_t(hq) * p.o_sh;
      if (exact) {  // computed again (V's values are in it), and written again
        float o[kDF][2], m, mlo, l;
        const ExactRow<T> row{
            static_cast<const T*>(p.q) + seq.bb * p.q_sb + (seq.q_row0 + i) * p.q_ss + int64_t(hq) * p.q_sh, kb, ke};
        const ExactKv<T> kv{k0, v0, p.k_ss, p.v_ss, p.d, p.dv, c, v_scale};
        if constexpr (Tr::kScoreMod) {  // the transformed scores, and the sink (not into a split's partial)
          const float slope2 = alibi_slope_log2(p, w.b, hq);
          const int dist0 = i + seq.sk - seq.sq;
          recompute_row_variants<T, kDF>(o, m, mlo, l, row, kv, lane, p, slope2, dist0,
                                            p.sinks != nullptr && !split ? p.sinks + hq : nullptr);
        } else {
          recompute_row<T, kDF>(o, m, mlo, l, row, kv, lane);
        }
        const auto get = [&](int df, int e) { return o[df][e]; };
        if (split) {
#pragma unroll
          for (int df = 0; df < kDF; ++df)
            if (df * 8 < p.dv)
              *reinterpret_cast<float2*>(p.part_o + at + df * 8 + 2 * t) = make_float2(o[df][0], o[df][1]);
          if (t == 0) p.part_ml[ml] = make_float4(m, mlo, l, 0.f);
        } else if constexpr (Tr::kFp8) {
          store_row<O, kDF>(get, m, mlo, l, static_cast<O*>(p.o) + at, p.lse != nullptr ? p.lse + ml : nullptr, p.dv, t,
                            ptx::Pack16{p.out_bf16});
        } else {
          store_row<O, kDF, true>(get, m, mlo, l, static_cast<O*>(p.o) + at, p.lse != nullptr ? p.lse + ml : nullptr, p.dv,
                                  t, ptx::PackAs<T>{});
        }
        continue;
      }
      // fp8: V's non-finite values at the cleaned keys it sees, into its written O (l > 0).
      // (16-bit flags are never tagged: no row gets here.)
      if constexpr (Tr::kFp8) {
        const int kb1[1] = {kb}, ke1[1] = {ke};
        auto add = [&](int, int col, float x) {
          if (split) p.part_o[at + col] += x * v_scale;
          else add_to_output<O>(static_cast<O*>(p.o) + at + col, x * v_scale, bf16);
        };
        if constexpr (!Tr::kVtIn) {  // V^T cleaned whole by the pre-pass or the fused transposer
          const Fp8NanBits bits{&p, seq.bb * p.kv_heads + hk,
                                p.cu_k != nullptr ? int(fp8_vt_row0(seq.k_row0, w.b)) : 0};
          add_nonfinite_v<T, 1, kDF>(v0, p.v_ss, p.dv, t, kb1, ke1, bits, add);
        } else {  // its transposer tags the item only: every key of the cut tiles
          add_nonfinite_v<T, 1, kDF>(v0, p.v_ss, p.dv, t, kb1, ke1, CutTileKeys<Tr::kBlockN>{CutTiles(tiles)}, add);
        }
      }
    }
  }
};

}  // namespace flashcore::cuda::sm90
