// fwd_sm90: fused attention forward for Hopper (sm_90a) on wgmma + TMA, 16-bit storage
// (f16, bf16) or fp8 (e4m3, with descales; see below), fp32 accumulation. One CTA
// computes kBlockM query rows of one (batch, head) with 1 + kBlockM / 64 warpgroups (warp
// specialization; 64-row tiles run two CTAs per SM, taller ones one):
//
//   warpgroup 0 (producer, 24 registers after setmaxnreg): one thread issues the TMA
//     loads: Q once, then each key tile's K and V into kStages-deep shared-memory rings;
//     full_k/full_v barriers count the bytes in (expect-tx), empty_k/empty_v barriers the
//     consumers' releases (K is released as soon as S is computed, V after P V).
//   warpgroups 1.. (consumers, the rest of the CTA's share of the register file: 240 each
//     for two, 160 for three, 232 for one of two CTAs per SM): 64 query rows each. Per
//     key tile:
//     S = Q K^T          wgmma m64n<kBlockN>k16, Q and K from shared memory (K-major)
//     mask, softmax      parts/seq_mask.cuh, parts/softmax.cuh on the accumulators
//                        (wgmma's accumulator layout is mma.sync's m16n8 fragments)
//     O += P V           wgmma m64n<kHeadDim>k16, P from registers (MmaOps::p_operand),
//                        V from shared memory read N-major (transposed descriptor)
//     S of tile n and P V of tile n - 1 are issued together; the softmax of tile n runs
//     while P V is in flight (intra-warpgroup overlap). kPingPong: the consumer
//     warpgroups take turns issuing their GEMMs (named barriers), so one's softmax also
//     runs under the others' GEMMs.
//     The epilogue (parts/epilogue.cuh) writes O and lse from registers.
//
// Shared memory: every tile is stored as kHeadDim / 64 column blocks of [rows][64]
// elements, 128-byte rows with the 128-byte swizzle (16-byte chunk c of row r at
// c ^ (r % 8)), which is what TMA's SWIZZLE_128B writes and wgmma's SW128 descriptors
// read. Out-of-bounds rows (past Sq or Sk) arrive zero-filled from TMA.
//
// Head dims that are multiples of 32 (96) are padded to whole 64-column blocks in shared
// memory (zeros from TMA); Q K^T runs only the k-steps of the real columns.
//
// fp8 (T = __nv_fp8_e4m3, head dims multiple of 128, f16/bf16 output): the same kernel
// with `if constexpr` where the type matters. Q K^T on wgmma m64nNk32 (32 bytes of K per
// k-step, as k16 of a 16-bit type, so the addressing is the same; a column block is 128
// elements). fp8 wgmma reads B only K-major, so V comes as V^T from the pre-pass's
// workspace (vt_fp8.cu; p.vt), rows = the kHeadDim columns of V, 128 keys per 128-byte
// column block, keys in the order of the S accumulator (parts/fp8.hpp), which lets P be
// packed to e4m3 in registers without shuffles (operands_fp8.cuh); P V is an RS wgmma with
// K-major B. P is scaled by 2^kPLog2 in the softmax's exponent (l carries it, lse drops
// it); q_descale * k_descale are folded into p.scale_log2, v_descale is p.o_scale.
// Not (yet) here: TMA stores, a persistent scheduler, GQA packing.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <type_traits>

#include "cuda/common/launch.hpp"
#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/common/tma_host.hpp"
#include "cuda/kernels/params.hpp"
#include "cuda/parts/epilogue.cuh"
#include "cuda/parts/operands.cuh"
#include "cuda/parts/operands_fp8.cuh"
#include "cuda/parts/seq_mask.cuh"
#include "cuda/parts/softmax.cuh"

namespace flashcore::cuda {

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kStages>
struct FwdSm90Traits {
  static constexpr bool kFp8 = std::is_same_v<T, __nv_fp8_e4m3>;
  static constexpr int kElem = int(sizeof(T));
  static constexpr int kColElems = 128 / kElem;  // elements per 128-byte column block
  static constexpr int kPLog2 = kFp8 ? kFp8PLog2 : 0;  // P stored as e4m3(2^kPLog2 P)
  static constexpr int kConsumers = kBlockM / 64;  // consumer warpgroups
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // 128-byte column blocks per row; a head dim that is not a multiple of 64 (96) is
  // padded to whole blocks in shared memory: TMA fills the columns past D with zeros.
  // fp8's V^T tile (kHeadDim rows of kBlockN keys) has the same size as a K tile when
  // both are multiples of 128.
  static constexpr int kColBlocks = (kHeadDim + kColElems - 1) / kColElems;
  static constexpr int kTileQ = kBlockM * kColBlocks * 128;
  static constexpr int kTileKV = kBlockN * kColBlocks * 128;
  static constexpr int kBarriers = 1 + 4 * kStages;  // q, full_k[], full_v[], empty_k[], empty_v[]
  // + 1024: the dynamic shared memory base is aligned up to the swizzle's 1024 bytes.
  static constexpr int kSmem = kTileQ + 2 * kStages * kTileKV + 8 * kBarriers + 1024;
  // 64-row tiles (one consumer warpgroup) run two CTAs per SM, so one CTA's prologue,
  // epilogue and softmax overlap the other's GEMMs (as a second CTA does for the sm80
  // family); taller tiles one.
  static constexpr int kCtasPerSm = kConsumers == 1 ? 2 : 1;
  // setmaxnreg: the producer keeps 24 registers, the consumers share the rest of the
  // CTA's share of the 64K-register file (multiples of 8).
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = (65536 / kCtasPerSm / 128 - kProducerRegs) / kConsumers / 8 * 8;
  // Ping-pong between the consumer warpgroups (FlashAttention-3's inter-warpgroup
  // schedule): each issues its GEMMs of a key tile only in its turn, handed round through
  // named barriers 1 .. kConsumers, so one warpgroup's softmax runs while another's GEMMs
  // do. Measured on an H200 with two consumers, same run: 2-10% faster than without on 35
  // of the 36 hd64/hd128 f16/bf16 rows (docs/results/cuda-sm90-2026-11-22.md, step 5).
  static constexpr bool kPingPong = kConsumers >= 2;
  static_assert(kHeadDim % 32 == 0 && kBlockM % 64 == 0 && kBlockN % 16 == 0 && kBlockN <= 256, "tile shape");
  static_assert(kConsumers <= 4, "named barriers 1 .. kConsumers");
  static_assert(!kFp8 || (kHeadDim % 128 == 0 && kBlockN % 128 == 0), "fp8: whole 128-byte column blocks");
  static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 65536 / kCtasPerSm, "register file");
  static_assert(kCtasPerSm * (kSmem + 1024) <= 233472, "shared memory of the SM (228 KiB)");
};

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kStages>
__global__ void __launch_bounds__(FwdSm90Traits<T, kHeadDim, kBlockM, kBlockN, kStages>::kThreads,
                                  FwdSm90Traits<T, kHeadDim, kBlockM, kBlockN, kStages>::kCtasPerSm)
    fwd_sm90_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                    const __grid_constant__ CUtensorMap tm_v, const FwdParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tr = FwdSm90Traits<T, kHeadDim, kBlockM, kBlockN, kStages>;
  constexpr int kNF = kBlockN / 8, kDF = kHeadDim / 8, kPK = kBlockN / MmaOps<T>::kPVKeys;
  constexpr int kKS = kHeadDim * Tr::kElem / 32;  // Q K^T k-steps of 32 bytes (real columns only)

  extern __shared__ unsigned char smem[];
  const uint32_t sQ = (ptx::smem_addr(smem) + 1023u) & ~1023u;
  const uint32_t sK = sQ + Tr::kTileQ;
  const uint32_t sV = sK + kStages * Tr::kTileKV;
  const uint32_t bar_q = sV + kStages * Tr::kTileKV;
  auto full_k = [&](int s) { return bar_q + 8u * (1 + s); };
  auto full_v = [&](int s) { return bar_q + 8u * (1 + kStages + s); };
  auto empty_k = [&](int s) { return bar_q + 8u * (1 + 2 * kStages + s); };
  auto empty_v = [&](int s) { return bar_q + 8u * (1 + 3 * kStages + s); };

  // Heavy (late, causal) query blocks first: they are launched in reverse order.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const SeqInfo seq = seq_info(p, b);
  const int m0 = m_block * kBlockM;
  if (m0 >= seq.sq) return;
  const int hk = h / p.group;
  const core::BandMask mask = band_mask(p, seq);
  const TileRange tiles = tile_range(mask, m0, min(m0 + kBlockM, seq.sq) - 1, seq.sk, kBlockN);

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    ptx::mbar_init(bar_q, 1);
    for (int s = 0; s < kStages; ++s) {
      ptx::mbar_init(full_k(s), 1);
      ptx::mbar_init(full_v(s), 1);
      ptx::mbar_init(empty_k(s), 4 * Tr::kConsumers);  // one arrival per consumer warp
      ptx::mbar_init(empty_v(s), 4 * Tr::kConsumers);
    }
    ptx::mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    // Producer: one thread issues every copy; the ring's stage `it % kStages` is reused
    // once all consumer warps released its previous round.
    ptx::setmaxnreg_dec<Tr::kProducerRegs>();
    if (threadIdx.x == 0) {
      ptx::tma_prefetch_desc(&tm_q);
      ptx::tma_prefetch_desc(&tm_k);
      ptx::tma_prefetch_desc(&tm_v);
      ptx::mbar_arrive_expect_tx(bar_q, Tr::kTileQ);
#pragma unroll
      for (int c = 0; c < Tr::kColBlocks; ++c)
        ptx::tma_load_4d(sQ + c * kBlockM * 128, &tm_q, bar_q, c * Tr::kColElems, int(seq.q_row0) + m0, h,
                         int(seq.bb));
      for (int n = tiles.lo, it = 0; n < tiles.hi; ++n, ++it) {
        const int stage = it % kStages;
        const uint32_t off = stage * Tr::kTileKV, parity = ((it / kStages) - 1) & 1;
        if (it >= kStages) ptx::mbar_wait(empty_k(stage), parity);
        ptx::mbar_arrive_expect_tx(full_k(stage), Tr::kTileKV);
#pragma unroll
        for (int c = 0; c < Tr::kColBlocks; ++c)
          ptx::tma_load_4d(sK + off + c * kBlockN * 128, &tm_k, full_k(stage), c * Tr::kColElems,
                           int(seq.k_row0) + n * kBlockN, hk, int(seq.bb));
        if (it >= kStages) ptx::mbar_wait(empty_v(stage), parity);
        ptx::mbar_arrive_expect_tx(full_v(stage), Tr::kTileKV);
        if constexpr (Tr::kFp8) {  // V^T (no varlen): kHeadDim rows of 128 keys per column block
#pragma unroll
          for (int c = 0; c < kBlockN / 128; ++c)
            ptx::tma_load_4d(sV + off + c * kHeadDim * 128, &tm_v, full_v(stage), n * kBlockN + c * 128, 0, hk,
                             int(seq.bb));
        } else {
#pragma unroll
          for (int c = 0; c < Tr::kColBlocks; ++c)
            ptx::tma_load_4d(sV + off + c * kBlockN * 128, &tm_v, full_v(stage), c * 64, int(seq.k_row0) + n * kBlockN,
                             hk, int(seq.bb));
        }
      }
    }
  } else {
    ptx::setmaxnreg_inc<Tr::kConsumerRegs>();
    using Op = MmaOps<T>;
    const int cw = wg - 1;  // this warpgroup's 64 rows: [64 cw, 64 cw + 64) of the block
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int row0 = m0 + 64 * cw + 16 * warp + g;  // this lane's rows: row0, row0 + 8
    const Band32 band{p.window_left, p.window_right, seq.sk - seq.sq, seq.sk};

    float acc[1][kDF][4];  // O, unnormalized
#pragma unroll
    for (int i = 0; i < kDF; ++i) acc[0][i][0] = acc[0][i][1] = acc[0][i][2] = acc[0][i][3] = 0.f;
    OnlineSoftmax<2> sm;
    sm.init();

    // Per key tile n after the first, in this warpgroup's turn: S_n = Q K_n^T and
    // O += P_{n-1} V_{n-1} issued back to back as two commit groups (FlashAttention-3's
    // intra-warpgroup overlap). wait<1> retires S_n: its mask and softmax (exponentials
    // in place, fp32) run while P V is still in flight; wait<0> retires P V, then O is
    // rescaled and S_n is converted into the P registers. Nothing the in-flight P V reads
    // (P) or writes (O) is touched before wait<0>, so ptxas keeps the wgmmas asynchronous
    // (writing P earlier made it serialize them, C7513, and lost 12-25%; see
    // docs/results/cuda-sm90-2026-11-22.md). K and V stages are released separately.
    auto issue_qk = [&](float (&s)[1][kNF][4], uint32_t off) {
      // Descriptors as one base per call + offsets (ptx::desc_add), not rebuilt per k-step.
      const uint64_t da0 = ptx::desc_sw128(sQ + cw * 64 * 128, 16, 1024), db0 = ptx::desc_sw128(sK + off, 16, 1024);
      ptx::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
        // k-step ks reads 32 bytes of column block ks / 4 (the swizzle is applied by the
        // hardware to the full address, so the start just moves by 32 bytes).
        const uint32_t cb = ks / 4, kb = (ks % 4) * 32;
        const uint64_t da = ptx::desc_add(da0, cb * kBlockM * 128 + kb);
        const uint64_t db = ptx::desc_add(db0, cb * kBlockN * 128 + kb);
        if (ks == 0)
          ptx::wgmma_ss_zero<kBlockN, T>(s[0], da, db);
        else
          ptx::wgmma_ss<kBlockN, T>(s[0], da, db, 1);
      }
      ptx::wgmma_commit();
    };
    auto issue_pv = [&](const uint32_t (&pa)[kPK][4], uint32_t off) {
      const uint64_t dv0 = ptx::desc_sw128(sV + off, Tr::kFp8 ? 16 : kBlockN * 128, 1024);
      ptx::wgmma_fence();
#pragma unroll
      for (int pk = 0; pk < kPK; ++pk) {
        if constexpr (Tr::kFp8) {
          // Keys [32 pk, 32 pk + 32): 32 bytes of V^T's rows (K-major, as K in Q K^T).
          const uint32_t cb = pk / 4, kb = (pk % 4) * 32;
          const uint64_t dv = ptx::desc_add(dv0, cb * kHeadDim * 128 + kb);
          ptx::wgmma_rs<kHeadDim, T>(acc[0], pa[pk], dv, 1);
        } else {
          // Keys [16 pk, 16 pk + 16) = V rows 2048 bytes on; V is the N-major B operand
          // (LBO: the next 64 columns = next column block, SBO: the next 8 keys).
          const uint64_t dv = ptx::desc_add(dv0, pk * 16 * 128);
          ptx::wgmma_rs_bt<kHeadDim, T>(acc[0], pa[pk], dv, 1);
        }
      }
      ptx::wgmma_commit();
    };
    // Mask + online softmax of tile n's scores: P (fp32) in place in s, the O rescale
    // factors in corr.
    auto softmax = [&](float (&s)[1][kNF][4], int n, float (&corr)[2]) {
      mask_scores<1, kNF>(s, n >= tiles.full_lo && n < tiles.full_hi, p.scale_log2, band, row0, n * kBlockN, t);
      sm.template update<1, kNF, Tr::kPLog2>(s, p.scale_log2 > 0.f ? p.scale_log2 : 1.f, corr);
    };
    auto to_operand = [&](const float (&s)[1][kNF][4], uint32_t (&pa)[kPK][4]) {
#pragma unroll
      for (int pk = 0; pk < kPK; ++pk) Op::p_operand(pa[pk], s[0], pk);
    };
    auto release = [&](uint32_t bar) {
      if (lane == 0) ptx::mbar_arrive(bar);
    };
    // Ping-pong turns: consumer cw waits on named barrier 1 + cw and hands the turn to the
    // next one (barrier 1 + (cw + 1) % kConsumers), each barrier counted over the 256
    // threads of the two warpgroups involved. The last consumer opens barrier 1 once up
    // front, so consumer 0 goes first, and skips its hand-over after its last turn
    // (nothing waits for it): every barrier sees as many arrivals as syncs.
    constexpr uint32_t kPPThreads = 256;
    constexpr int kLastCw = Tr::kConsumers - 1;
    auto turn_begin = [&]() {
      if constexpr (Tr::kPingPong) ptx::named_bar_sync(1 + cw, kPPThreads);
    };
    auto turn_end = [&](bool last) {
      if constexpr (Tr::kPingPong) {
        if (!last || cw != kLastCw) ptx::named_bar_arrive(1 + (cw + 1) % Tr::kConsumers, kPPThreads);
      }
    };

    ptx::mbar_wait(bar_q, 0);
    uint32_t pa[kPK][4];
    float corr[2];
    if constexpr (Tr::kPingPong) {
      if (cw == kLastCw && tiles.lo < tiles.hi) ptx::named_bar_arrive(1, kPPThreads);
    }
    if (tiles.lo < tiles.hi) {
      float s[1][kNF][4];
      ptx::mbar_wait(full_k(0), 0);
      turn_begin();
      issue_qk(s, 0);
      turn_end(false);
      ptx::wgmma_wait<0>();
      ptx::fence_regs(s[0]);
      release(empty_k(0));
      softmax(s, tiles.lo, corr);  // corr of the first tile multiplies O = 0: unused
      to_operand(s, pa);
    }
    int it = 1;
    for (int n = tiles.lo + 1; n < tiles.hi; ++n, ++it) {
      const int stage = it % kStages, prev = (it - 1) % kStages;
      float s[1][kNF][4];
      ptx::mbar_wait(full_k(stage), (it / kStages) & 1);
      ptx::mbar_wait(full_v(prev), ((it - 1) / kStages) & 1);
      turn_begin();
      issue_qk(s, stage * Tr::kTileKV);
      issue_pv(pa, prev * Tr::kTileKV);
      turn_end(false);
      ptx::wgmma_wait<1>();  // S_n
      ptx::fence_regs(s[0]);
      release(empty_k(stage));
      softmax(s, n, corr);
      ptx::wgmma_wait<0>();  // P_{n-1} V_{n-1}
      ptx::fence_regs(acc[0]);
      ptx::fence_regs(s[0]);  // P_n's conversion stays below the wait
      release(empty_v(prev));
      rescale_rows<1, kDF>(acc, corr);
      to_operand(s, pa);
    }
    if (tiles.lo < tiles.hi) {
      const int prev = (it - 1) % kStages;
      ptx::mbar_wait(full_v(prev), ((it - 1) / kStages) & 1);
      turn_begin();
      issue_pv(pa, prev * Tr::kTileKV);
      turn_end(true);
      ptx::wgmma_wait<0>();
      ptx::fence_regs(acc[0]);
      release(empty_v(prev));
    }

    sm.finish();
    float* glse = p.lse == nullptr ? nullptr : p.lse + seq.bb * p.lse_sb + h * p.lse_sh + seq.q_row0;
    auto store = [&](auto* type) {  // O in the output's type
      using O = std::remove_pointer_t<decltype(type)>;
      O* go = static_cast<O*>(p.o) + seq.bb * p.o_sb + seq.q_row0 * p.o_ss + h * p.o_sh;
      store_output<O, kDF>(acc[0], sm.m, sm.l, go, p.o_ss, glse, row0, seq.sq, p.dv, t);
    };
    if constexpr (Tr::kFp8) {  // O * v_descale as f16 or bf16; l carries 2^kPLog2, lse not
      sm.m[0] -= Tr::kPLog2;
      sm.m[1] -= Tr::kPLog2;
      const float os[2] = {p.o_scale, p.o_scale};
      rescale_rows<1, kDF>(acc, os);
      if (p.out_bf16)
        store(static_cast<__nv_bfloat16*>(nullptr));
      else
        store(static_cast<__half*>(nullptr));
    } else {
      store(static_cast<T*>(nullptr));
    }
  }
#endif
}

// Host launcher: tensor maps of Q, K, V ([B][S][H][D] by strides, any order; D must be
// kHeadDim), then the launch on the caller's stream. Varlen: the maps cover the packed
// tensors ([1][total][H][D]); a sequence's tiles start at its first row, and rows of the
// next sequence that a tile reaches are masked (keys) or not stored (queries).
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kStages>
cudaError_t launch_fwd_sm90(const FwdParams& p, cudaStream_t stream) {
  using Tr = FwdSm90Traits<T, kHeadDim, kBlockM, kBlockN, kStages>;
  if (p.d != kHeadDim || p.dv != kHeadDim) return cudaErrorInvalidValue;
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  const int kv_heads = p.heads / p.group;
  const bool varlen = p.cu_q != nullptr;
  const int rows_q = varlen ? p.total_q : p.sq, rows_k = varlen ? p.total_k : p.sk, nb = varlen ? 1 : p.batch;
  CUtensorMap tq, tk, tv;
  cudaError_t e;
  if constexpr (Tr::kFp8) {  // V^T from the pre-pass's workspace: [b][kv head][Dv][vt_sk] bytes
    if (varlen || p.vt == nullptr) return cudaErrorInvalidValue;
    e = make_tma_8bit_4d(&tq, p.q, p.d, rows_q, p.heads, nb, p.q_ss, p.q_sh, p.q_sb, kBlockM);
    if (e == cudaSuccess) e = make_tma_8bit_4d(&tk, p.k, p.d, rows_k, kv_heads, nb, p.k_ss, p.k_sh, p.k_sb, kBlockN);
    if (e == cudaSuccess)
      e = make_tma_8bit_4d(&tv, p.vt, p.vt_sk, p.dv, kv_heads, nb, p.vt_sk, p.dv * p.vt_sk, kv_heads * p.dv * p.vt_sk,
                           kHeadDim);
  } else {
    e = make_tma_16bit_4d(&tq, bf16, p.q, p.d, rows_q, p.heads, nb, p.q_ss, p.q_sh, p.q_sb, kBlockM);
    if (e == cudaSuccess)
      e = make_tma_16bit_4d(&tk, bf16, p.k, p.d, rows_k, kv_heads, nb, p.k_ss, p.k_sh, p.k_sb, kBlockN);
    if (e == cudaSuccess)
      e = make_tma_16bit_4d(&tv, bf16, p.v, p.dv, rows_k, kv_heads, nb, p.v_ss, p.v_sh, p.v_sb, kBlockN);
  }
  if (e != cudaSuccess) return e;
  auto kernel = fwd_sm90_kernel<T, kHeadDim, kBlockM, kBlockN, kStages>;
  static std::atomic<uint64_t> smem_done{0};
  e = opt_in_smem_once(kernel, Tr::kSmem, smem_done);
  if (e != cudaSuccess) return e;
  const dim3 grid((p.sq + kBlockM - 1) / kBlockM, p.heads, p.batch);
  kernel<<<grid, Tr::kThreads, Tr::kSmem, stream>>>(tq, tk, tv, p);
  return cudaGetLastError();
}

}  // namespace flashcore::cuda
