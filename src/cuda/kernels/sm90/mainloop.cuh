// The consumer of the sm90 forward: one warpgroup's 64 query rows of a work item against the
// item's key tiles, as they arrive in the K and V pipelines. Per key tile:
//
//   S = Q K^T          wgmma m64n<kBlockN>k16 (fp8: k32), Q and K from shared memory
//                      (K-major), or (Tr::kQRegs) Q's A fragments from registers
//   mask, softmax      parts/seq_mask.cuh, parts/softmax.cuh on the accumulators
//                      (wgmma's accumulator layout is mma.sync's m16n8 fragments)
//   O += P V           wgmma m64n<kHeadDim>k16, P from registers (MmaOps::p_operand), V
//                      from shared memory read N-major (transposed descriptor); fp8: V^T
//                      K-major (the 64-byte swizzle, parts/fp8.hpp's key order)
//
// S of tile n and P V of tile n - 1 are issued back to back as two commit groups
// (FlashAttention-3's intra-warpgroup overlap): wait<1> retires S_n, whose mask and softmax
// (exponentials in place, fp32) run while P V is still in flight; wait<0> retires P V, then
// O is rescaled and S_n is converted into the P registers. Nothing the in-flight P V reads
// (P) or writes (O) is touched before wait<0>, so ptxas keeps the wgmmas asynchronous
// (writing P earlier made it serialize them, C7513, and lost 12-25 %; see
// docs/results/cuda-sm90-2026-11-22.md). With two P buffers (Tr::kSpeculate) P_n is written
// into the one P V does not read, before wait<0>, by the speculative softmax
// (OnlineSoftmax::try_update), the key loop unrolled by two so that they swap roles without
// copies. The wait<0> is wgmma_wait_after the row sums: ptxas hoisted a plain one above the
// softmax, which then never overlapped its own P V. K and V stages are released separately
// (K once S is computed, V after P V).
//
// Ping-pong (Tr::kPingPong, FlashAttention-3's inter-warpgroup schedule): the consumer
// warpgroups take turns issuing their GEMMs, so one's softmax also runs under the others'
// GEMMs. Each turn barrier kBarTurn0 + c is counted over the 256 threads of the two
// warpgroups involved (consumer c syncs, consumer c - 1 arrives). The turns run on from one
// item to the next: the last consumer opens barrier kBarTurn0 once (open_turns), so consumer
// 0 goes first; every turn hands over, and consumer 0 takes the one hand-over left after the
// item loop (close_turns), so every barrier sees as many arrivals as syncs. A consumer may
// thus begin the next item's first S GEMM as soon as the other issued its last P V, while
// that one runs its epilogue.
//
// fp8 (e4m3): P is scaled by 2^kFp8PLog2 in the softmax's exponent (l carries it, lse drops
// it); q_descale * k_descale are folded into p.scale_log2, v_descale is p.o_scale, and the
// optional per-head factors (p.*_descale_heads) into the item's copies of the two. kChord:
// the chord form of the speculative softmax's exponentials (FwdParams::exp_chord).
#pragma once

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/kernels/params.hpp"
#include "cuda/kernels/sm90/bad_keys.cuh"
#include "cuda/kernels/sm90/pipeline.cuh"
#include "cuda/kernels/sm90/scheduler.cuh"
#include "cuda/kernels/sm90/smem.cuh"
#include "cuda/parts/fp8.hpp"
#include "cuda/parts/operands.cuh"
#include "cuda/parts/operands_fp8.cuh"
#include "cuda/parts/score_mod.cuh"
#include "cuda/parts/seq_mask.cuh"
#include "cuda/parts/softmax.cuh"

namespace flashcore::cuda::sm90 {

// fix_flags' bits (RowRepair, repair.cuh) of a lane: row half is to be computed again exactly
// (1 << half: its l is NaN, or, 16-bit, its O came out non-finite), its l is 0 (4 << half);
// fp8: the item's V^T had cleaned keys (kFixTagged).
constexpr uint32_t kFixTagged = 16u;
// Whether flags ask for the repair (rows with l = 0 alone do not).
__device__ __forceinline__ bool fix_needed(uint32_t flags) { return (flags & (3u | kFixTagged)) != 0; }

// What the consumer computes of one item and the epilogue writes out: O unnormalized (this
// lane's fragments of the warpgroup's 64 rows x kHeadDim) and the rows' softmax state.
template <class Tr>
struct ItemResult {
  float acc[1][Tr::kHeadDim / 8][4];
  OnlineSoftmax<2> sm;
};

// The head's sink joined to both of the lane's rows (the score variants' kernel): O's rows
// scaled, m = lse log2 e and l = 1, so the epilogue writes O and lse with the sink in the sum.
template <class Tr>
__device__ __forceinline__ void join_sink_rows(ItemResult<Tr>& r, float sink) {
  float f[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float lse;
    f[half] = join_sink_log2(r.sm.m[half] + r.sm.mlo[half], r.sm.l[half], sink, lse);
    r.sm.m[half] = lse * kLog2eF;
    r.sm.mlo[half] = 0.f;
    r.sm.l[half] = 1.f;
  }
  rescale_rows<1, Tr::kHeadDim / 8>(r.acc, f);
}

template <typename T, class Tr, bool kChord>
struct Mainloop {
  using Op = MmaOps<T>;
  static constexpr int kBlockM = Tr::kBlockM, kBlockN = Tr::kBlockN, kHeadDim = Tr::kHeadDim, kStages = Tr::kStages;
  static constexpr int kPLog2 = Tr::kFp8 ? kFp8PLog2 : 0;            // P stored as e4m3(2^kPLog2 P)
  static constexpr int kSlack = Tr::kFp8 ? kFp8Slack : kSoftmaxSlack;  // lazy-rescale slack
  static constexpr int kNF = kBlockN / 8, kDF = kHeadDim / 8, kPK = kBlockN / Op::kPVKeys;
  static constexpr int kKS = kHeadDim * Tr::kElem / 32;  // Q K^T k-steps of 32 bytes (real columns only)
  static constexpr uint32_t kPPThreads = 256;             // a ping-pong barrier's threads
  using QRegs = uint32_t[Tr::kQRegs ? kKS : 1][4];        // Tr::kQRegs: Q's A fragments
  using PRegs = uint32_t[kPK][4];                          // P as the A operand of P V

  SmemLayout<Tr> s;
  int cw;          // this warpgroup's 64 rows: [64 cw, 64 cw + 64) of the block
  int warp, lane;  // warp of the warpgroup, lane

  __device__ __forceinline__ explicit Mainloop(SmemLayout<Tr> layout)
      : s(layout), cw(int(threadIdx.x / 128) - 1), warp((threadIdx.x / 32) % 4), lane(threadIdx.x % 32) {}

  __device__ __forceinline__ void open_turns() const {
    if constexpr (Tr::kPingPong) {
      if (cw == Tr::kConsumers - 1) ptx::named_bar_arrive(kBarTurn0, kPPThreads);
    }
  }
  __device__ __forceinline__ void close_turns() const {
    if constexpr (Tr::kPingPong) {
      if (cw == 0) ptx::named_bar_sync(kBarTurn0, kPPThreads);  // the last hand-over (or the opening)
    }
  }
  // Consumer cw waits on barrier kBarTurn0 + cw and hands the turn to the next one.
  __device__ __forceinline__ void turn_begin() const {
    if constexpr (Tr::kPingPong) ptx::named_bar_sync(kBarTurn0 + cw, kPPThreads);
  }
  __device__ __forceinline__ void turn_end() const {
    if constexpr (Tr::kPingPong) ptx::named_bar_arrive(kBarTurn0 + (cw + 1) % Tr::kConsumers, kPPThreads);
  }

  // S = Q K^T on the K stage at byte offset off. k-step ks reads 32 bytes of column block
  // ks / 4 (the swizzle is applied by the hardware to the full address, so the start just
  // moves by 32 bytes); descriptors as base + offset (ptx::desc_add): one base per call
  // instead of the address arithmetic per k-step.
  __device__ __forceinline__ void issue_qk(float (&sc)[1][kNF][4], uint32_t off, const QRegs& qa) const {
    const uint64_t da0 = ptx::desc_sw128(s.q + cw * 64 * 128, 16, 1024), db0 = ptx::desc_sw128(s.k + off, 16, 1024);
    ptx::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) {
      const uint32_t cb = ks / 4, kb = (ks % 4) * 32;
      const uint64_t da = ptx::desc_add(da0, cb * kBlockM * 128 + kb);
      const uint64_t db = ptx::desc_add(db0, cb * kBlockN * 128 + kb);
      if constexpr (Tr::kQRegs) {
        if (ks == 0)
          ptx::wgmma_rs_zero<kBlockN, T>(sc[0], qa[0], db);
        else
          ptx::wgmma_rs<kBlockN, T>(sc[0], qa[ks], db, 1);
      } else if (ks == 0) {
        ptx::wgmma_ss_zero<kBlockN, T>(sc[0], da, db);
      } else {
        ptx::wgmma_ss<kBlockN, T>(sc[0], da, db, 1);
      }
    }
    ptx::wgmma_commit();
  }

  // O += P V on the V stage at byte offset off.
  __device__ __forceinline__ void issue_pv(float (&acc)[1][kDF][4], const PRegs& pa, uint32_t off) const {
    const uint64_t dv0 = Tr::kFp8 ? ptx::desc_sw64(s.v + off, 16, 512) : ptx::desc_sw128(s.v + off, kBlockN * 128, 1024);
    ptx::wgmma_fence();
#pragma unroll
    for (int pk = 0; pk < kPK; ++pk) {
      if constexpr (Tr::kFp8) {
        // Keys [32 pk, 32 pk + 32): 32 bytes of V^T's 64-byte rows (K-major, SW64).
        const uint32_t cb = pk / 2, kb = (pk % 2) * 32;
        const uint64_t dv = ptx::desc_add(dv0, cb * kHeadDim * 64 + kb);
        ptx::wgmma_rs<kHeadDim, T>(acc[0], pa[pk], dv, 1);
      } else {
        // Keys [16 pk, 16 pk + 16) = V rows 2048 bytes on; V is the N-major B operand
        // (LBO: the next 64 columns = next column block, SBO: the next 8 keys).
        const uint64_t dv = ptx::desc_add(dv0, pk * 16 * 128);
        ptx::wgmma_rs_bt<kHeadDim, T>(acc[0], pa[pk], dv, 1);
      }
    }
    ptx::wgmma_commit();
  }

  static __device__ __forceinline__ void to_operand(const float (&sc)[1][kNF][4], PRegs& pa) {
#pragma unroll
    for (int pk = 0; pk < kPK; ++pk) Op::p_operand(pa[pk], sc[0], pk);
  }

  // Tr::kQRegs: Q's m16n8k32 A fragments of k-step ks (bytes 32 ks ..) by one ldmatrix.x4
  // each: matrix j = rows 8 (j % 2) .. of the warp's 16, bytes 16 (j / 2) .. of the step
  // (lane L addresses row L % 8 of matrix L / 8, at its swizzled 16-byte chunk).
  __device__ __forceinline__ void load_q_regs(QRegs& qa) const {
    const int mi = lane / 8, r = 64 * cw + 16 * warp + lane % 8 + 8 * (mi % 2);
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) {
      const int c16 = (ks % 4) * 2 + mi / 2;
      ptx::ldmatrix_x4(qa[ks], s.q + (ks / 4) * kBlockM * 128 + r * 128 + ((c16 ^ (r % 8)) << 4));
    }
  }

  // Heads in columns (FwdParams::q_hcol): the columns of this warpgroup's 64 Q rows that are
  // not the head's, [0, r) and [r + D, 16 kKS) (the neighbouring heads'), set to 0, so that
  // K's columns there (its neighbours' too) add nothing to Q K^T; then fenced into the async
  // proxy that wgmma reads through, and the warpgroup synchronized (its rows are read by all
  // of its warps). The chunks the head does not touch are stored as zeros, the one or two it
  // starts or ends in are masked.
  __device__ __forceinline__ void clear_q_tail(int d, int r0) const {
    if constexpr (!Tr::kFp8) {
      constexpr int kChunks = kKS * 2;  // 16-byte chunks of a row that Q K^T reads
      const int lo = r0, hi = r0 + d, tw = int(threadIdx.x % 128);
      const int c_end = (hi + 7) / 8, n = kChunks - c_end + 2;  // chunk 0 and chunks [c_end - 1, kChunks)
      for (int x = tw; x < 64 * n; x += 128) {
        const int r = 64 * cw + x / n, i = x % n, c = i == 0 ? 0 : c_end - 2 + i;
        if (i == 1 && c == 0) continue;  // (the head ends in chunk 0: done as i == 0)
        const uint32_t a = s.q + (c / 8) * kBlockM * 128 + r * 128 + (((c % 8) ^ (r % 8)) << 4);
        const uint4 v = ptx::lds128(a);
        // Element e of the chunk (column 8 c + e) stays where lo <= 8 c + e < hi.
        const auto mask = [&](uint32_t w, int j) {
          const int e0 = 8 * c + 2 * j;
          return (e0 >= lo && e0 < hi ? w & 0xFFFFu : 0u) | (e0 + 1 >= lo && e0 + 1 < hi ? w & 0xFFFF0000u : 0u);
        };
        ptx::sts128(a, make_uint4(mask(v.x, 0), mask(v.y, 1), mask(v.z, 2), mask(v.w, 3)));
      }
      ptx::fence_proxy_async();
      ptx::named_bar_sync(kBarEpilogue0 + cw, 128);  // (the epilogue's barrier: the same 128 threads)
    }
  }

  // fp8: an item's factors, p's per-tensor ones (scale_log2, o_scale on entry) times its
  // (batch, KV head hk) entries of the per-head arrays that are given. 16-bit: unchanged.
  static __device__ __forceinline__ void item_factors(const FwdParams& p, const SeqInfo& seq, int hk, float& scale_log2,
                                                      float& o_scale) {
    if constexpr (Tr::kFp8) {
      const int64_t hi = seq.bb * (p.heads / p.group) + hk;
      if (p.q_descale_heads != nullptr) scale_log2 *= p.q_descale_heads[hi];
      if (p.k_descale_heads != nullptr) scale_log2 *= p.k_descale_heads[hi];
      if (p.v_descale_heads != nullptr) o_scale *= p.v_descale_heads[hi];
    }
  }

  // One item: the n-th one this warpgroup handles (qi; its Q buffer's phase), its key
  // tiles `tiles` (it0: the CTA's K/V tiles before them, advanced), the lane's rows row0 and
  // row0 + 8 (packed rows: queries row >> shift), the band, the item's scale (fp8: with its
  // per-head factors; 16-bit: p.scale_log2, read where it is used) and o_scale (fp8).
  // Tr::kScoreMod: each tile's scores are transformed before the mask (parts/score_mod.cuh;
  // slope2: the item's ALiBi slope times log2 e). With softcap, or a scale the softmax cannot
  // take as its factor (ScoreFold), they go to the log2 domain there and the mask and softmax
  // take the factor 1; else ALiBi's term is added divided by the scale and the softmax folds
  // the scale into its exponent, as in the plain kernels (one FMUL per score fewer).
  __device__ __forceinline__ void run(const FwdParams& p, int qi, int& it0, const TileRange& tiles,
                                      const KeyWalk<Tr>& walk, int row0, int shift,
                                      const Band32& band, float item_scale_log2, float o_scale, ItemResult<Tr>& out,
                                      int q_r, [[maybe_unused]] float slope2 = 0.f) const {
    const Pipeline<1> q_pipe = s.q_pipe();
    const Pipeline<kStages> k_pipe = s.k_pipe(), v_pipe = s.v_pipe();
    const int t = lane % 4;
    [[maybe_unused]] const ScoreFold fold(p, slope2);
    auto scale_log2 = [&] {
      if constexpr (Tr::kFp8) return item_scale_log2;
      else if constexpr (Tr::kScoreMod) return fold.factor;
      else return p.scale_log2;
    };
    float(&acc)[1][kDF][4] = out.acc;
    OnlineSoftmax<2>& sm = out.sm;
    QRegs qa;
#pragma unroll
    for (int i = 0; i < kDF; ++i) acc[0][i][0] = acc[0][i][1] = acc[0][i][2] = acc[0][i][3] = 0.f;
    sm.init();

    // Mask + online softmax of tile n's scores; returns whether O needs the rescale by
    // corr. spec (a tile after the rows' first): try_update packs P against the max in
    // use into pa chunk by chunk and keeps sc; where a max moved past the slack, update.
    // update writes P in place in sc; with two P buffers (Tr::kSpeculate) it is packed into
    // pa at once, else by the caller once the in-flight P V that reads pa is retired.
    // Tr::kScoreMod: ro, the rows' offsets (ALiBi's row term on tiles wholly on one side of
    // this warp's rows' diagonals; transform_scores), which the softmax adds per row.
    auto softmax = [&](float (&sc)[1][kNF][4], int n, float (&corr)[2], PRegs& pa, bool spec) {
      [[maybe_unused]] float ro[2];
      if constexpr (Tr::kScoreMod) {
        const int wrow0 = row0 - lane / 4;  // the warp's first row
        transform_scores<1, kNF>(sc, p, fold, alibi_side(wrow0, wrow0 + 15, band.offset, n * kBlockN, kBlockN),
                                 band.offset, row0, n * kBlockN, t, ro);
      }
      mask_scores<1, kNF>(sc, n >= tiles.full_lo && n < tiles.full_hi, scale_log2(), band, row0, n * kBlockN, t, shift);
      const float e = scale_log2() > 0.f ? scale_log2() : 1.f;
      if (spec && sm.template try_update<kNF, kNF / kPK, kPLog2, kSlack, kChord, Tr::kScoreMod>(
                      sc, e, [&](const float (&pf)[kNF][4], int c) { Op::p_operand(pa[c], pf, c); }, ro))
        return false;
      sm.template update<1, kNF, kPLog2, kSlack, Tr::kScoreMod>(sc, e, corr, ro);
      if constexpr (Tr::kSpeculate) to_operand(sc, pa);
      return true;
    };

    q_pipe.consumer_wait(PipelineState<1>{qi});
    if constexpr (!Tr::kFp8) {
      if (p.q_hcol != 0) clear_q_tail(p.d, q_r);
    }
    // Tr::kQRegs: Q's buffer is released once its fragments are in registers (persistent:
    // the producer loads the next item's Q while this one runs).
    if constexpr (Tr::kQRegs) {
      load_q_regs(qa);
      if constexpr (Tr::kPersistent) {
        __syncwarp();  // every lane's reads before lane 0's release (the producer's TMA overwrites Q)
        q_pipe.consumer_release(PipelineState<1>{qi}, lane);
      }
    }
    // P operands: with Tr::kSpeculate two register buffers, the softmax of tile n writing
    // P_n into one while the P V of tile n - 1, issued just before, reads P_{n-1} from the
    // other. Otherwise pa0 alone, P_n packed into it after P_{n-1} V_{n-1} retires (pa1 is
    // never used: no registers).
    PRegs pa0, pa1;
    float corr[2];
    if (tiles.lo < tiles.hi) {
      float sc[1][kNF][4];
      const PipelineState<kStages> st{it0};
      k_pipe.consumer_wait(st);
      turn_begin();
      issue_qk(sc, st.stage() * Tr::kTileKV, qa);
      turn_end();
      ptx::wgmma_wait<0>();
      ptx::fence_regs(sc[0]);
      k_pipe.consumer_release(st, lane);
      softmax(sc, walk.tile(tiles.lo), corr, pa0, false);  // corr of the first tile multiplies O = 0: unused
      if constexpr (!Tr::kSpeculate) to_operand(sc, pa0);
    }
    // Tile n (it: this CTA's K/V tile count at tile n): P_{n-1} in pprev, P_n into pcur
    // (the same buffer unless speculative).
    auto step = [&](int n, int it, const PRegs& pprev, PRegs& pcur) {
      const PipelineState<kStages> st{it}, prev{it - 1};
      float sc[1][kNF][4];
      k_pipe.consumer_wait(st);
      v_pipe.consumer_wait(prev);
      turn_begin();
      issue_qk(sc, st.stage() * Tr::kTileKV, qa);
      issue_pv(acc, pprev, prev.stage() * Tr::kTileKV);
      turn_end();
      ptx::wgmma_wait<1>();  // S_n
      ptx::fence_regs(sc[0]);
      k_pipe.consumer_release(st, lane);
      const bool moved = softmax(sc, n, corr, pcur, Tr::kSpeculate);
      ptx::wgmma_wait_after<0>(sm.l[0], sm.l[1]);  // P_{n-1} V_{n-1}, once the softmax is done
      ptx::fence_regs(acc[0]);
      if constexpr (!Tr::kSpeculate) ptx::fence_regs(sc[0]);  // P_n's conversion stays below the wait
      v_pipe.consumer_release(prev, lane);
      if (moved) rescale_rows<1, kDF>(acc, corr);
      if constexpr (!Tr::kSpeculate) to_operand(sc, pcur);
    };
    int n = tiles.lo + 1, it = it0 + 1;  // visit n - lo: tile walk.tile(n)
    bool last_in_pa1 = false;
    if constexpr (Tr::kSpeculate) {
      for (; n + 1 < tiles.hi; n += 2, it += 2) {
        step(walk.tile(n), it, pa0, pa1);
        step(walk.tile(n + 1), it + 1, pa1, pa0);
      }
      last_in_pa1 = n < tiles.hi;
      if (last_in_pa1) {
        step(walk.tile(n), it, pa0, pa1);
        ++it;
      }
    } else {
      for (; n < tiles.hi; ++n, ++it) step(walk.tile(n), it, pa0, pa0);
    }
    // Every S of this item retired: Q's buffer is free.
    if constexpr (Tr::kPersistent && !Tr::kQRegs) q_pipe.consumer_release(PipelineState<1>{qi}, lane);
    auto last_pv = [&](const PRegs& pl) {
      const PipelineState<kStages> prev{it - 1};
      v_pipe.consumer_wait(prev);
      turn_begin();
      issue_pv(acc, pl, prev.stage() * Tr::kTileKV);
      turn_end();
      ptx::wgmma_wait<0>();
      ptx::fence_regs(acc[0]);
      v_pipe.consumer_release(prev, lane);
    };
    if (tiles.lo < tiles.hi) {
      if (last_in_pa1) {  // always false without speculation
        last_pv(pa1);
      } else {
        last_pv(pa0);
      }
    }

    it0 += tiles.hi > tiles.lo ? tiles.hi - tiles.lo : 0;

    // Row sums and maxima for the epilogue (fp8: l carries 2^kPLog2, O too: they cancel,
    // lse not); rows with no finite score zeroed; fp8: O * v_descale. The rows the softmax
    // could not take (l NaN) are computed again after the epilogue (repair.cuh).
    sm.finish(kPLog2);
    zero_empty_rows<1, kDF>(acc, sm.l);
    if constexpr (Tr::kFp8) {
      const float os[2] = {o_scale, o_scale};
      rescale_rows<1, kDF>(acc, os);
    }
  }

  // After the key loop: this lane's reasons for RowRepair (repair.cuh), kept over the
  // epilogue instead of the item's state: row half to be computed again (1 << half) where its
  // l is NaN or (16-bit) its O is not finite, its l 0 (4 << half), and (fp8) kFixTagged where
  // the item's V^T had cleaned keys (BadKeys).
  //
  // 16-bit: the kernels do not clean V, so a NaN / Inf of V at a key hidden from a row by the
  // band or Sk (in a tile they cut) gives that row P V's 0 * NaN = NaN (bad_keys.cuh). Such a
  // row, and any other whose O is not finite (one that sees a NaN / Inf V: non-finite again
  // when computed exactly, as the reference wants), is computed again over the keys it
  // sees. The test: per element an fma by 0 (0 for a finite value, NaN for NaN / Inf),
  // summed in four chains (two per row half, kDF each), then or-ed over the row's quad (the
  // four lanes hold its columns), so the lanes of a row agree. Rows with no finite score
  // were zeroed (l = 0) and pass.
  __device__ __forceinline__ uint32_t fix_flags(const FwdParams& p, int qi, const ItemResult<Tr>& res) const {
    uint32_t f = 0;
    if constexpr (Tr::kFp8) {
      f = BadKeys<Tr>{s.bad}.tagged(p, qi) ? kFixTagged : 0u;
    } else {
      float z[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int df = 0; df < kDF; ++df)
#pragma unroll
        for (int i = 0; i < 4; ++i) z[i] = fmaf(res.acc[0][df][i], 0.f, z[i]);
      f = (isnan(z[0] + z[1]) ? 1u : 0u) | (isnan(z[2] + z[3]) ? 2u : 0u);
      f |= __shfl_xor_sync(0xffffffffu, f, 1);
      f |= __shfl_xor_sync(0xffffffffu, f, 2);
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (isnan(res.sm.l[half])) f |= 1u << half;
      if (res.sm.l[half] == 0.f) f |= 4u << half;
    }
    return f;
  }
};

}  // namespace flashcore::cuda::sm90
