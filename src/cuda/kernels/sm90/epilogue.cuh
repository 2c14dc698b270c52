// The epilogue of the sm90 forward: one consumer warpgroup's 64 rows of an item (ItemResult:
// O unnormalized, the rows' max and sum) written out, in one of three ways:
//
// - KV splits (not persistent): the split's unnormalized rows and their (m, l) into the
//   partials for kv_combine.cu (store_split).
// - Through shared memory (Tr::kOStaged; store_staged): O / l into this warpgroup's rows of
//   O's staging buffer (16-bit, one item per CTA: Q's buffer, its last S GEMM has retired;
//   persistent or fp8: a buffer of its own, once the last item's rows were read out of it;
//   hd256: half of O at a time, Tr::kOPasses) in the 16-bit swizzled layout (16-byte chunk c
//   of local row r at c ^ (r % 8), conflict-free for the fragments' stores), then either one
//   thread stores the boxes of 64 rows with cp.async.bulk.tensor (tma: the launcher mapped O,
//   fixed-length batches; rows past Sq and columns past Dv are clipped by the map) without
//   waiting for them, or the warpgroup's threads copy the rows out, 16 bytes per thread and
//   copy, consecutive threads along a row (4-byte stores where O's base or strides are not
//   16-byte aligned, 2-byte ones where they are not 4-byte aligned or Dv ends a chunk),
//   skipping rows past the sequence's end (varlen, the last block) and columns past Dv. fp8 kernels without a buffer of their own (64x192, "_vt": one item per
//   CTA) stage O in Q's buffer, half of O per pass.
// - From registers (store_registers; parts/epilogue.cuh): fp8 where O cannot be mapped; and
//   16-bit heads read in columns whose O columns come shifted (store_shifted).
// lse always from registers. On an H200 the TMA stores made the 16-bit S = 512 hd256 rows
// 1.14x faster than register stores, the fp8 rows 1.0-1.3x, and the row copies the 16-bit
// ones 1.01-1.06x (docs/results/cuda-sm90-2026-11-22.md, 2026-11-22 and 2026-11-27).
//
// GQA packing (shift = log2 G > 0): packed row prow is query prow >> shift of head
// (h << shift) | (prow & (G - 1)); O's TMA map is then ordered {D, H, S, B}.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/kernels/params.hpp"
#include "cuda/kernels/sm90/mainloop.cuh"
#include "cuda/kernels/sm90/pipeline.cuh"
#include "cuda/kernels/sm90/scheduler.cuh"
#include "cuda/kernels/sm90/smem.cuh"
#include "cuda/parts/epilogue.cuh"

namespace flashcore::cuda::sm90 {

template <typename T, class Tr>
struct Epilogue {
  static constexpr int kBlockM = Tr::kBlockM, kDF = Tr::kHeadDim / 8;
  // O's elements: T, or for fp8 f16 / bf16 as asked (one epilogue for both, the conversion
  // chosen at run time).
  using O = std::conditional_t<Tr::kFp8, __half, T>;
  const CUtensorMap* tm_o;
  SmemLayout<Tr> s;
  int cw, warp, lane;

  // The consumer warpgroup cw's epilogue (warp, lane: of the warpgroup).
  __device__ __forceinline__ Epilogue(const CUtensorMap* map, SmemLayout<Tr> layout, int cw_, int warp_, int lane_)
      : tm_o(map), s(layout), cw(cw_), warp(warp_), lane(lane_) {}

  // This split's rows and their (m, mlo, l) for kv_combine.cu: row (j R + the query's row in
  // O's [B Sq] or varlen [total] rows) H + head, R = o_rows().
  __device__ __forceinline__ void store_split(const FwdParams& p, const ItemResult<Tr>& r, const WorkItem& w,
                                              const SeqInfo& seq, int row0, int shift, int split_j) const {
    const int t = lane % 4;
    const int64_t rows_o = p.o_rows();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int prow = row0 + 8 * half, qrow = prow >> shift, hq = (w.h << shift) | (prow & ((1 << shift) - 1));
      if (qrow >= seq.sq) continue;
      const int64_t i = (split_j * rows_o + seq.bb * p.sq + seq.q_row0 + qrow) * p.heads + hq;
      float* po = p.part_o + i * p.dv;
#pragma unroll
      for (int df = 0; df < kDF; ++df)
        if (df * 8 < p.dv)
          *reinterpret_cast<float2*>(po + df * 8 + 2 * t) = make_float2(r.acc[0][df][2 * half], r.acc[0][df][2 * half + 1]);
      if (t == 0) p.part_ml[i] = make_float4(r.sm.m[half], r.sm.mlo[half], r.sm.l[half], 0.f);
    }
  }

  // The conversion of O's pairs: 16-bit T, or fp8's f16 / bf16 output.
  __device__ __forceinline__ static auto packer(const FwdParams& p) {
    if constexpr (Tr::kFp8)
      return ptx::Pack16{p.out_bf16};
    else
      return ptx::PackAs<T>{};
  }

  // From registers (kernels without a staging buffer).
  __device__ __forceinline__ void store_registers(const FwdParams& p, const ItemResult<Tr>& r, const WorkItem& w,
                                                  const SeqInfo& seq, int row0, int shift) const {
    const int t = lane % 4;
    // The item's first query head (packed: the first of its KV head's G heads).
    const int h0 = w.h << shift;
    float* glse = p.lse == nullptr ? nullptr : p.lse + seq.bb * p.lse_sb + h0 * p.lse_sh + seq.q_row0;
    O* go = static_cast<O*>(p.o) + seq.bb * p.o_sb + seq.q_row0 * p.o_ss + h0 * p.o_sh;
    // Packed rows on their own call: with the head stride in the one call, ptxas moved two
    // of the persistent hd128 kernels' spills into the main loop (sass_check).
    if (shift > 0)
      store_output<O, kDF>(r.acc[0], r.sm.m, r.sm.mlo, r.sm.l, go, p.o_ss, glse, row0, seq.sq, p.dv, t, shift, p.o_sh, p.lse_sh,
                           packer(p));
    else
      store_output<O, kDF>(r.acc[0], r.sm.m, r.sm.mlo, r.sm.l, go, p.o_ss, glse, row0, seq.sq, p.dv, t, 0, 0, 0, packer(p));
  }

  // Through O's staging buffer (above), kPassBlocks column blocks per pass (Tr::kOPasses:
  // the buffer holds that many; each pass after the first, and the next item's first, waits
  // until the last one's rows were read out). fix: whether this warp's rows need RowRepair
  // (repair.cuh); returns whether the warpgroup's do (told through SmemLayout::fix_word
  // across the first pass's barrier: item qi's parity, cleared after its last reader), and
  // then the rows are in O (the copies or the TMA stores complete) before it returns.
  __device__ __forceinline__ bool store_staged(const FwdParams& p, const ItemResult<Tr>& r, const WorkItem& w,
                                               const SeqInfo& seq, int row0, int shift, bool tma, int qi,
                                               bool fix) const {
    constexpr int kPassBlocks = Tr::kOColBlocks / Tr::kOPasses, kPassDF = kDF / Tr::kOPasses;
    const int t = lane % 4;
    const auto pack = packer(p);
    const uint32_t base = s.o + cw * 64 * 128;
    // One stmatrix x4 per two 8-column fragments: matrices (df, rows g), (df, rows g + 8),
    // (df + 1, g), (df + 1, g + 8); lane 8 j + i gives row i of matrix j, local row
    // lr = 16 warp + i + 8 (j % 2) (so lr % 8 == i), 16-byte chunk (df % 8 + j / 2) ^ i
    // = (df % 8) ^ c with c = (j / 2) ^ i (df even). A quarter of the store instructions
    // of one 32-bit store per fragment pair: the S512 hd128 rows 1.00-1.02x (H200).
    const int j = lane / 8, i = lane % 8, c = (j / 2) ^ i;
    const uint32_t lane_base = base + (16 * warp + i + 8 * (j % 2)) * 128;
    const float inv0 = row_inv(r.sm.l[0]), inv1 = row_inv(r.sm.l[1]);
    const int tw = threadIdx.x % 128;
    const uint32_t bar = kBarEpilogue0 + cw, fix_word = s.fix_word(cw, qi);
    if (fix && lane == 0) ptx::sts32(fix_word, 1u);  // (before the first pass's barrier)
#pragma unroll
    for (int ps = 0; ps < Tr::kOPasses; ++ps) {
      if (Tr::kPersistent || ps > 0) {
        if (tw == 0) ptx::tma_store_wait_read();
        ptx::named_bar_sync(bar, 128);
      }
#pragma unroll
      for (int df = ps * kPassDF; df < (ps + 1) * kPassDF; df += 2)
        ptx::stmatrix_x4(lane_base + (df / 8 - ps * kPassBlocks) * kBlockM * 128 + (((df % 8) ^ c) << 4),
                         pack(r.acc[0][df][0] * inv0, r.acc[0][df][1] * inv0),
                         pack(r.acc[0][df][2] * inv1, r.acc[0][df][3] * inv1),
                         pack(r.acc[0][df + 1][0] * inv0, r.acc[0][df + 1][1] * inv0),
                         pack(r.acc[0][df + 1][2] * inv1, r.acc[0][df + 1][3] * inv1));
      if (ps == 0) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int prow = row0 + 8 * half, qrow = prow >> shift, hq = (w.h << shift) | (prow & ((1 << shift) - 1));
          if (p.lse != nullptr && t == 0 && qrow < seq.sq)
            p.lse[seq.bb * p.lse_sb + hq * p.lse_sh + seq.q_row0 + qrow] = row_lse(r.sm.m[half], r.sm.mlo[half], r.sm.l[half]);
        }
      }
      if (tma) {
        ptx::fence_proxy_async();
        ptx::named_bar_sync(bar, 128);
        if (ps == 0) fix = __any_sync(0xffffffffu, ptx::lds32(fix_word) != 0);  // (warp-uniform to ptxas)
        if (tw == 0) {
#pragma unroll
          for (int cb = ps * kPassBlocks; cb < (ps + 1) * kPassBlocks; ++cb)
            ptx::tma_store_4d(tm_o, base + (cb - ps * kPassBlocks) * kBlockM * 128, cb * 64,
                              shift > 0 ? w.h << shift : w.m0 + 64 * cw, shift > 0 ? (w.m0 + 64 * cw) >> shift : w.h,
                              int(seq.bb));
          ptx::tma_store_commit();
        }
      } else {
        ptx::named_bar_sync(bar, 128);
        if (ps == 0) fix = __any_sync(0xffffffffu, ptx::lds32(fix_word) != 0);  // (warp-uniform to ptxas)
        copy_rows<kPassBlocks>(p, w, seq, shift, base, ps, tw);
      }
    }
    if (fix) {  // rare: the rows written before RowRepair's threads rewrite some
      if (tma && tw == 0) {
        ptx::tma_store_wait();
        ptx::fence_proxy_async_global();
      }
      ptx::named_bar_sync(bar, 128);
      if (tw == 0) ptx::sts32(fix_word, 0u);  // every thread has read it
    }
    return fix;
  }

  // The row copies of one pass out of the staging buffer.
  template <int kPassBlocks>
  __device__ __forceinline__ void copy_rows(const FwdParams& p, const WorkItem& w, const SeqInfo& seq, int shift,
                                            uint32_t base, int ps, int tw) const {
    const int h0 = w.h << shift;
    O* go = static_cast<O*>(p.o) + seq.bb * p.o_sb + seq.q_row0 * p.o_ss + h0 * p.o_sh;
    const uint64_t align = (reinterpret_cast<uintptr_t>(p.o) | uint64_t(p.o_sb | p.o_ss | p.o_sh) * sizeof(O));
    const bool vec16 = (align & 15) == 0, vec4 = (align & 3) == 0;
    constexpr int kRowChunks = kPassBlocks * 8;  // 16-byte chunks of a row in this pass
#pragma unroll 4
    for (int x = tw; x < 64 * kRowChunks; x += 128) {
      const int r = x / kRowChunks, cb = (x % kRowChunks) / 8, c16 = x % 8;
      const int prow = w.m0 + 64 * cw + r, qrow = prow >> shift, col = (ps * kPassBlocks + cb) * 64 + c16 * 8;
      if (qrow >= seq.sq || col >= p.dv) continue;
      const uint4 v = ptx::lds128(base + cb * kBlockM * 128 + r * 128 + ((c16 ^ (r % 8)) << 4));
      O* dst = go + qrow * p.o_ss + (prow & ((1 << shift) - 1)) * p.o_sh + col;
      const int n = min(8, p.dv - col);  // (Dv off the multiples of 8: its last chunk is short)
      if (n == 8 && vec16) {
        *reinterpret_cast<uint4*>(dst) = v;
      } else if (n == 8 && vec4) {
        uint32_t* d4 = reinterpret_cast<uint32_t*>(dst);
        d4[0] = v.x;
        d4[1] = v.y;
        d4[2] = v.z;
        d4[3] = v.w;
      } else {  // 2-byte stores: rows that are only element-aligned (heads in columns)
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        uint16_t* d2 = reinterpret_cast<uint16_t*>(dst);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (e < n) d2[e] = uint16_t(w[e / 2] >> (16 * (e % 2)));
      }
    }
  }

  // Heads in columns with V's columns from r_v on (FwdParams::v_hcol; never packed): O's
  // column c is the accumulator's c + r_v, stored from registers as 2-byte elements (the rows
  // are not 4-byte aligned), with the lse.
  __device__ __forceinline__ void store_shifted(const FwdParams& p, const ItemResult<Tr>& r, const WorkItem& w,
                                                const SeqInfo& seq, int row0) const {
    const int t = lane % 4, rv = (w.h / p.group) * p.v_hcol & 7;
    const auto pack = packer(p);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + 8 * half;
      if (row >= seq.sq) continue;
      const float inv = row_inv(r.sm.l[half]);
      uint16_t* orow = reinterpret_cast<uint16_t*>(static_cast<O*>(p.o) + seq.bb * p.o_sb +
                                                   (seq.q_row0 + row) * p.o_ss + int64_t(w.h) * p.o_sh);
#pragma unroll
      for (int df = 0; df < kDF; ++df) {
        const uint32_t x = pack(r.acc[0][df][2 * half] * inv, r.acc[0][df][2 * half + 1] * inv);
        const int c = df * 8 + 2 * t - rv;
        if (c >= 0 && c < p.dv) orow[c] = uint16_t(x);
        if (c + 1 >= 0 && c + 1 < p.dv) orow[c + 1] = uint16_t(x >> 16);
      }
      if (p.lse != nullptr && t == 0)
        p.lse[seq.bb * p.lse_sb + w.h * p.lse_sh + seq.q_row0 + row] = row_lse(r.sm.m[half], r.sm.mlo[half], r.sm.l[half]);
    }
  }

  // The item's rows, the way the kernel and the launch allow (above). 16-bit: TMA stores or
  // the threads' row copies (heads in columns: store_shifted). fp8: TMA stores, else from registers (with the row copies in
  // the fp8 kernels, the persistent hd128 128x192 one ran 3-5 % slower on H200 in its TMA
  // path too, same main-loop SASS: code layout; 2026-11-27).
  // fix, the return: as store_staged's (from registers: this warp's own).
  __device__ __forceinline__ bool store(const FwdParams& p, const ItemResult<Tr>& r, const WorkItem& w,
                                        const SeqInfo& seq, int row0, int shift, int qi, bool fix) const {
    if constexpr (!Tr::kFp8) {
      if (p.v_hcol != 0) {
        store_shifted(p, r, w, seq, row0);
        return fix;
      }
    }
    if constexpr (Tr::kOStaged && !Tr::kFp8)
      return store_staged(p, r, w, seq, row0, shift, p.o_tma, qi, fix);
    else if (Tr::kOStaged && p.o_tma)
      return store_staged(p, r, w, seq, row0, shift, true, qi, fix);
    store_registers(p, r, w, seq, row0, shift);
    return fix;
  }

  // After the last item: O's last boxes read out of shared memory before the CTA exits.
  __device__ __forceinline__ void drain() const {
    if (threadIdx.x % 128 == 0) ptx::tma_store_wait_read();
  }
};

}  // namespace flashcore::cuda::sm90
