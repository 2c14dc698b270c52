// fwd_sm90: fused attention forward for Hopper (sm_90a) on wgmma + TMA, 16-bit storage
// (f16, bf16) or fp8 (e4m3, with descales), fp32 accumulation. The kernel composes the parts
// under kernels/sm90/:
//
//   smem.cuh, pipeline.cuh   shared-memory layout; the Q buffer and the K / V rings as
//                            pipelines of full / empty mbarriers, walked by PipelineStates
//   scheduler.cuh            work items (kBlockM query rows of one (sequence, head), GQA-
//                            packed or not): one CTA per item (with KV splits), or persistent
//                            CTAs walking a static list; varlen sequences
//   load.cuh                 the producer: TMA loads of Q, K, V by key block (ContiguousKv
//                            says where a key block lives)
//   vt_transpose.cuh         fp8: V^T made by the producer warpgroup's spare warps
//   bad_keys.cuh             hidden keys' NaN / Inf in V: 16-bit, rows whose O comes out
//                            non-finite computed again (repair.cuh); fp8, the items whose
//                            V^T had NaN cleaned (their rows take it back after the epilogue)
//   mainloop.cuh             the consumer: S = Q K^T, mask, online softmax, O += P V on the
//                            key tiles (intra-warpgroup overlap, ping-pong, speculation)
//   epilogue.cuh             O and lse out: KV-split partials, TMA stores or row copies
//                            through shared memory, or register stores
//
// Each CTA has 1 + kBlockM / 64 warpgroups (warp specialization; 64-row tiles run two or
// three CTAs per SM, taller ones one): warpgroup 0 produces (24 registers after setmaxnreg;
// its one TMA thread issues every load, its other three warps transpose fp8 V where the
// kernel makes V^T), warpgroups 1.. consume, 64 query rows each (the rest of the CTA's share
// of the register file: 240 each for two, 160 for three, 232 for one of two CTAs per SM).
// Head dims that are multiples of 32 (96) are padded to whole 64-column blocks in shared
// memory (zeros from TMA); Q K^T runs only the k-steps of the real columns.
//
// fp8 (T = __nv_fp8_e4m3, head dims multiples of 128, f16/bf16 output): the same kernel with
// `if constexpr` where the type matters. Q K^T on wgmma m64nNk32 (32 bytes of K per k-step,
// as k16 of a 16-bit type, so the addressing is the same; a column block is 128 elements).
// fp8 wgmma reads B only K-major, so V comes as V^T (parts/fp8.hpp's key order): from a
// workspace (p.vt) written by the pre-pass (vt_fp8.cu) or, in the persistent hd128 kernels
// (FwdSm90Config::kVtFused, given p.vt_sync), by the producer's spare warps during the
// kernel; or ("_vt", kVtIn) made from V itself in shared memory. 64 keys per 64-byte column
// block (the 64-byte swizzle, so that kBlockN can be any multiple of 64, e.g. 192 at hd128:
// 256 needs more registers than a consumer has). P V is an RS wgmma with K-major B.
//
// GQA packing (p.pack_shift = log2 G > 0, set by the backend for short Sq): an item covers
// the G query heads of one KV head, packed row r = query (r >> shift) of head
// G hk + (r & (G - 1)): Q (and O, by TMA stores) move through maps of [B][S][H][D] ordered
// {D, H, S, B} with boxes of G heads x rows / G queries, so the shared-memory tiles hold
// exactly these rows; K and V are read once per KV head instead of once per query head.
// Varlen batches and outputs that TMA cannot map are packed too: Q's map then covers the
// packed tensor ([1][total][H][D]; rows past a sequence's end are computed, not stored) and
// the registers or the row copies store O.
//
// Persistence (kPersistent, the "_p" keys) is a second compiled variant: the item loop
// costs the main loop ~8% more instructions (ptxas builds some descriptors per thread),
// which the overlap of one item's epilogue with the next one's prologue repays only where
// items are short (H200, S = 512: 1.11-1.24x with the TMA-store epilogue; a dynamic
// scheduler on long causal rows: 0.82-0.94x; docs/results/cuda-sm90-2026-11-22.md).
#pragma once

#include <cuda.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <type_traits>

#include "cuda/common/launch.hpp"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/common/tma_host.hpp"
#include "cuda/kernels/item_order.hpp"
#include "cuda/kernels/params.hpp"
#include "cuda/kernels/sm90/bad_keys.cuh"
#include "cuda/kernels/sm90/epilogue.cuh"
#include "cuda/kernels/sm90/load.cuh"
#include "cuda/kernels/sm90/mainloop.cuh"
#include "cuda/kernels/sm90/pipeline.cuh"
#include "cuda/kernels/sm90/repair.cuh"
#include "cuda/kernels/sm90/scheduler.cuh"
#include "cuda/kernels/sm90/smem.cuh"
#include "cuda/kernels/sm90/traits.hpp"
#include "cuda/kernels/sm90/vt_transpose.cuh"

namespace flashcore::cuda {

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kStages, int kVariant>
using FwdSm90Traits = FwdSm90Config<int(sizeof(T)), std::is_same_v<T, __nv_fp8_e4m3>, kHeadDim, kBlockM, kBlockN,
                                    kStages, kVariant>;

// kChord: the fp8 kernels' second form, for Exp2Mode::fast without lse (FwdParams::exp_chord;
// OnlineSoftmax::speculate): half of the speculative softmax's exponentials by their chord.
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kStages, int kVariant, bool kChord = false>
__global__ void __launch_bounds__(FwdSm90Traits<T, kHeadDim, kBlockM, kBlockN, kStages, kVariant>::kThreads,
                                  FwdSm90Traits<T, kHeadDim, kBlockM, kBlockN, kStages, kVariant>::kCtasPerSm)
    fwd_sm90_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                    const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                    const FwdParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tr = FwdSm90Traits<T, kHeadDim, kBlockM, kBlockN, kStages, kVariant>;
  using Sched = std::conditional_t<Tr::kPersistent, sm90::PersistentScheduler<kBlockM, kBlockN>,
                                   sm90::SingleItemScheduler<kBlockM, kBlockN>>;
  extern __shared__ unsigned char smem[];
  const sm90::SmemLayout<Tr> s(ptx::smem_addr(smem));
  const Sched sched(p);
  sched.allow_dependents();
  if constexpr (!Tr::kPersistent) {
    if (sched.past_end(sched.own, seq_info(p, sched.own.b))) return;  // varlen: past this sequence's end
  }
  if (threadIdx.x == 0) {
    s.init_barriers();
    sm90::BadKeys<Tr>{s.bad}.init();
  }
  __syncthreads();

  if (threadIdx.x / 128 == 0) {
    // Producer warpgroup: the TMA thread, and (fp8, where the kernel makes V^T) the
    // transposing warps; the other warps have nothing to do.
    ptx::setmaxnreg_dec<Tr::kProducerRegs>();
    if (threadIdx.x == 0) {
      sm90::Producer<Tr>{&tm_q, &tm_k, &tm_v, s}.run(p, sched);
    } else if (Tr::kVtFused && threadIdx.x >= 32) {
      if (p.vt_sync != nullptr) sm90::FusedVtTransposer<Tr>{s}.run(p);
    } else if constexpr (Tr::kVtIn) {  // one item per CTA
      if (threadIdx.x >= 32) sm90::RingVtTransposer<Tr>{s}.run(sched.item_tiles(p, sched.own, seq_info(p, sched.own.b)));
    }
  } else {
    // Consumer warpgroups: per work item the main loop, then the epilogue.
    ptx::setmaxnreg_inc<Tr::kConsumerRegs>();
    const sm90::Mainloop<T, Tr, kChord> ml(s);
    const sm90::Epilogue<T, Tr> ep(&tm_o, s, ml.cw, ml.warp, ml.lane);
    int it0 = 0;  // K/V tiles so far (as the producer counts them)
    ml.open_turns();
    sm90::WorkItem wi;
    for (int r = 0, qi = 0; sched.round_item(p, r, wi); ++r) {  // qi: items so far
      const SeqInfo seq = seq_info(p, wi.b);
      if (sched.past_end(wi, seq)) continue;
      // This lane's (packed) rows: row0, row0 + 8; their queries are row >> shift.
      const int row0 = wi.m0 + 64 * ml.cw + 16 * ml.warp + ml.lane / 4;
      const Band32 band{p.window_left, p.window_right, seq.sk - seq.sq, seq.sk};
      float scale_log2 = p.scale_log2, o_scale = p.o_scale;
      ml.item_factors(p, seq, sched.kv_head(p, wi), scale_log2, o_scale);
      sm90::ItemResult<Tr> res;
      const TileRange tiles = sched.item_tiles(p, wi, seq);
      const sm90::KeyWalk<Tr> walk(p, tiles, wi.m0, seq);  // (the producer's order)
      const int q_r = Tr::kFp8 ? 0 : wi.h * p.q_hcol & 7;  // heads in columns: where the head's columns start
      if constexpr (Tr::kScoreMod)  // (never packed: the policy gives variant calls no GQA packing)
        ml.run(p, qi, it0, tiles, walk, row0, 0, band, scale_log2, o_scale, res, q_r, alibi_slope_log2(p, wi.b, wi.h));
      else
        ml.run(p, qi, it0, tiles, walk, row0, sched.shift, band, scale_log2, o_scale, res, q_r);
      // The rows' reasons for a second look (rows to compute again exactly: l NaN, or 16-bit
      // O not finite; fp8's V NaN to add back: repair.cuh), kept over the epilogue in one
      // register; taken before a sink joins the rows (the repair joins it to the rows it
      // computes again).
      const uint32_t fix = ml.fix_flags(p, qi, res);
      bool fix_any = __any_sync(0xffffffffu, sm90::fix_needed(fix));
      if constexpr (Tr::kScoreMod) {
        if (p.sinks != nullptr && !(Sched::kSplits && sched.ns > 1))  // (with splits: kv_combine.cu joins it)
          join_sink_rows(res, p.sinks[wi.h]);
      }
      if (Sched::kSplits && sched.ns > 1)
        ep.store_split(p, res, wi, seq, row0, sched.shift, sched.split_j);
      else
        fix_any = ep.store(p, res, wi, seq, row0, sched.shift, qi, fix_any);
      if (fix_any) sm90::RowRepair<T, Tr>{s, ml.cw, ml.warp, ml.lane}.run(p, sched, wi, fix);
      ++qi;
    }
    ml.close_turns();
    ep.drain();
  }
#endif
}

// Host launcher: tensor maps of Q, K, V ([B][S][H][D] by strides, any order; D and Dv at
// most kHeadDim, e4m3 equal to it), then the launch on the caller's stream. Varlen: the maps cover the packed
// tensors ([1][total][H][D]); a sequence's tiles start at its first row, and rows of the
// next sequence that a tile reaches are masked (keys) or not stored (queries).
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kStages, int kVariant>
cudaError_t launch_fwd_sm90(const FwdParams& p, cudaStream_t stream) {
  using Tr = FwdSm90Traits<T, kHeadDim, kBlockM, kBlockN, kStages, kVariant>;
  constexpr bool kPersistent = Tr::kPersistent;
  // 16-bit: D, Dv up to kHeadDim (TMA zero-fills the columns past them, the epilogue writes
  // Dv columns); e4m3: D == Dv == kHeadDim (the V^T layouts assume it).
  if (Tr::kFp8 ? p.d != kHeadDim || p.dv != kHeadDim || p.q_hcol != 0 || p.k_hcol != 0 || p.v_hcol != 0
              : p.d > kHeadDim || p.dv > kHeadDim || p.d < 1 || p.dv < 1)
    return cudaErrorInvalidValue;
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  const int kv_heads = p.heads / p.group;
  const bool varlen = p.cu_q != nullptr;
  const int rows_q = varlen ? p.total_q : p.sq, rows_k = varlen ? p.total_k : p.sk, nb = varlen ? 1 : p.batch;
  // Q's and O's maps (16-bit): boxes of `rows` rows of one head's queries, or with GQA
  // packing (g = 2^pack_shift heads) ordered {D, H, S, B}, boxes of g heads x rows / g
  // queries, the packed rows' order.
  const int g = 1 << p.pack_shift;
  auto row_map = [&](CUtensorMap* map, bool is_bf16, const void* base, int d, int64_t ss, int64_t sh, int64_t sb,
                     int rows) {
    return g > 1 ? make_tma_16bit_4d(map, is_bf16, base, d, p.heads, rows_q, nb, sh, ss, sb, g, rows / g)
                 : make_tma_16bit_4d(map, is_bf16, base, d, rows_q, p.heads, nb, ss, sh, sb, rows);
  };
  CUtensorMap tq, tk, tv;
  cudaError_t e;
  if (g > 1 && (g > 64 || kBlockM % g != 0 || Tr::kScoreMod)) return cudaErrorInvalidValue;  // ("_sv": no packing)
  if constexpr (Tr::kFp8) {  // V itself (Tr::kVtIn: 64-key boxes), or V^T from the pre-pass's workspace: [b][kv head][Dv][vt_sk] bytes (varlen: b = 1)
    if (!Tr::kVtIn && p.vt == nullptr) return cudaErrorInvalidValue;
    e = g > 1 ? make_tma_8bit_4d(&tq, p.q, p.d, p.heads, rows_q, nb, p.q_sh, p.q_ss, p.q_sb, g, 128, kBlockM / g)
              : make_tma_8bit_4d(&tq, p.q, p.d, rows_q, p.heads, nb, p.q_ss, p.q_sh, p.q_sb, kBlockM);
    if (e == cudaSuccess) e = make_tma_8bit_4d(&tk, p.k, p.d, rows_k, kv_heads, nb, p.k_ss, p.k_sh, p.k_sb, kBlockN);
    if (e == cudaSuccess)
      e = Tr::kVtIn ? make_tma_8bit_4d(&tv, p.v, p.dv, rows_k, kv_heads, nb, p.v_ss, p.v_sh, p.v_sb, 64)
                    : make_tma_8bit_4d(&tv, p.vt, p.vt_sk, p.dv, kv_heads, nb, p.vt_sk, p.dv * p.vt_sk,
                                       kv_heads * p.dv * p.vt_sk, kHeadDim, 64);
  } else {
    // Heads in columns (FwdParams::q_hcol, ...): [nb][rows][(heads - 1) hcol + d] (the head
    // coordinate's extent 1), so that a box reads a head's row from its first column.
    auto col_map = [&](CUtensorMap* map, const void* base, int d, int hcol, int heads, int rows, int64_t ss,
                       int64_t sb, int box_rows) {
      return make_tma_16bit_4d(map, bf16, base, int64_t(heads - 1) * hcol + d, rows, 1, nb, ss, 0, sb, box_rows);
    };
    if (p.q_hcol != 0 && g > 1) return cudaErrorInvalidValue;
    e = p.q_hcol != 0 ? col_map(&tq, p.q, p.d, p.q_hcol, p.heads, rows_q, p.q_ss, p.q_sb, kBlockM)
                      : row_map(&tq, bf16, p.q, p.d, p.q_ss, p.q_sh, p.q_sb, kBlockM);
    if (e == cudaSuccess)
      e = p.k_hcol != 0 ? col_map(&tk, p.k, p.d, p.k_hcol, kv_heads, rows_k, p.k_ss, p.k_sb, kBlockN)
                        : make_tma_16bit_4d(&tk, bf16, p.k, p.d, rows_k, kv_heads, nb, p.k_ss, p.k_sh, p.k_sb, kBlockN);
    if (e == cudaSuccess)
      e = p.v_hcol != 0 ? col_map(&tv, p.v, p.dv, p.v_hcol, kv_heads, rows_k, p.v_ss, p.v_sb, kBlockN)
                        : make_tma_16bit_4d(&tv, bf16, p.v, p.dv, rows_k, kv_heads, nb, p.v_ss, p.v_sh, p.v_sb, kBlockN);
  }
  if (e != cudaSuccess) return e;
  // O's map for the TMA-store epilogue (fixed-length batches; O is 16-bit, fp8's too), boxes
  // of 64 rows, where the backend found O mappable (p.o_tma: TMA wants a 16-byte aligned
  // base and strides) and the kernel has a staging buffer (Tr::kOStaged); otherwise the 16-bit
  // kernels' threads copy O's rows out of that buffer and the fp8 ones store from registers.
  FwdParams kp = p;
  kp.o_tma = false;
  CUtensorMap to{};
  if constexpr (Tr::kOStaged) {
    // Fixed-length batches (p.o_tma implies it): rows_q and nb are then Sq and B.
    const bool o_bf16 = Tr::kFp8 ? p.out_bf16 : bf16;
    kp.o_tma = p.o_tma && !varlen && row_map(&to, o_bf16, p.o, p.dv, p.o_ss, p.o_sh, p.o_sb, 64) == cudaSuccess;
  }
  // The kernel, or its chord form (Tr::kChordForm, p.exp_chord), each opted in once.
  auto kernel = fwd_sm90_kernel<T, kHeadDim, kBlockM, kBlockN, kStages, kVariant>;
  static std::atomic<uint64_t> smem_done{0}, chord_smem_done{0};
  std::atomic<uint64_t>* done = &smem_done;
  if constexpr (Tr::kChordForm) {
    if (p.exp_chord) {
      kernel = fwd_sm90_kernel<T, kHeadDim, kBlockM, kBlockN, kStages, kVariant, true>;
      done = &chord_smem_done;
    }
  }
  e = opt_in_smem_once(kernel, Tr::kSmem, *done);
  if (e != cudaSuccess) return e;
  // One CTA per item (query blocks, heads, batch), or persistent: as many CTAs as fit the
  // SMs at once (or one per item, when there are fewer).
  // GQA packing: Sq G rows of each KV head.
  const int n_mb = ((p.sq << p.pack_shift) + kBlockM - 1) / kBlockM, item_heads = p.heads >> p.pack_shift;
  kp.div_heads = FastDiv(item_heads);
  // KV splits: kv_splits CTAs per item (not persistent).
  if (p.kv_splits > 1 && (kPersistent || p.part_o == nullptr || p.part_ml == nullptr))
    return cudaErrorInvalidValue;
  dim3 grid(unsigned(n_mb * p.kv_splits), unsigned(item_heads), unsigned(p.batch));  // kv_splits >= 1
  if constexpr (kPersistent != 0) {
    const int64_t items = int64_t(n_mb) * item_heads * p.batch;
    const int64_t ctas = std::min<int64_t>(items, int64_t(p.sms > 0 ? p.sms : 132) * Tr::kCtasPerSm);
    if (items > INT32_MAX - ctas) return cudaErrorInvalidValue;  // 32-bit item numbers
    const int64_t kv_bytes = int64_t(p.sk) * (p.d + p.dv) * int64_t(sizeof(T));
    kp.order = ItemOrder(persistent_item_group(band_mask(p, p.sq, p.sk), p.sq, p.sk, p.pack_shift, kBlockM, kBlockN,
                                               item_heads * p.batch, int(ctas), kv_bytes, p.l2_bytes,
                                               forced_item_group()),
                         n_mb);
    grid = dim3(static_cast<unsigned>(ctas));
  }
  kernel<<<grid, Tr::kThreads, Tr::kSmem, stream>>>(tq, tk, tv, to, kp);
  return cudaGetLastError();
}

}  // namespace flashcore::cuda
