// fwd_sm90: fused attention forward for Hopper (sm_90a) on wgmma + TMA, 16-bit storage
// (f16, bf16) or fp8 (e4m3, with descales; see below), fp32 accumulation. A work item is
// kBlockM query rows of one (batch, head); each CTA has 1 + kBlockM / 64 warpgroups (warp
// specialization; 64-row tiles run two CTAs per SM, taller ones one). One CTA per item,
// or (kPersistent) persistent CTAs that walk a static list of items (below), each head's
// latest (heaviest, causal) query blocks first:
//
//   warpgroup 0 (producer, 24 registers after setmaxnreg): one thread loads the item's
//     Q (kPersistent: once the consumers released the last item's, empty_q), then issues
//     each key tile's K and V into kStages-deep shared-memory rings;
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
//     Epilogue: O through shared memory and TMA stores where the launcher could map O
//     (p.o_tma: fixed-length batches): each consumer warpgroup writes its 64 rows into its
//     own rows of Q's buffer (its last S GEMM has retired; kPersistent and fp8: of a
//     buffer of their own, once the last item's stores read it; hd256: half of O at a
//     time, kOPasses) in the 16-bit swizzled layout, and one thread stores them with
//     cp.async.bulk.tensor (rows past Sq and columns past Dv are clipped by the map)
//     without waiting for them (fp8 64x192 and _vt, no room for a buffer: Q's, half of O
//     per pass). Otherwise (varlen, O not 16-byte aligned) the 16-bit kernels' threads
//     copy the rows out of that buffer (16-byte pieces along a row), and the fp8 ones
//     store O from registers (parts/epilogue.cuh). lse always from registers. On an H200
//     the TMA stores made the 16-bit S = 512 hd256 rows 1.14x faster than register stores
//     (docs/results/cuda-sm90-2026-11-22.md, session 5), the fp8 rows 1.0-1.3x (session
//     28: hd256 S512 1.25-1.31x), and the row copies the 16-bit ones 1.01-1.06x.
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
// elements). fp8 wgmma reads B only K-major, so V comes as V^T from a workspace (p.vt)
// written by the pre-pass (vt_fp8.cu) or, in the persistent hd128 kernels (Tr::kVtFused,
// given p.vt_sync), by the producer's three spare warps during the kernel (below the TMA
// thread's branch); rows = the kHeadDim columns of V, 64 keys per 64-byte
// column block (the 64-byte swizzle, so that kBlockN can be any multiple of 64, e.g. 192
// at hd128: 256 needs more registers than a consumer has), keys in the order of the S
// accumulator (parts/fp8.hpp), which lets P be packed to e4m3 in registers without
// shuffles (operands_fp8.cuh); P V is an RS wgmma with
// K-major B. P is scaled by 2^kPLog2 in the softmax's exponent (l carries it, lse drops
// it); q_descale * k_descale are folded into p.scale_log2, v_descale is p.o_scale, and the
// optional per-head factors (p.*_descale_heads) into the item's copies of the two.
// GQA packing (p.pack_shift = log2 G > 0, set by the backend for short Sq): an
// item covers the G query heads of one KV head, packed row r = query (r >> shift) of
// head G hk + (r & (G - 1)): Q (and O, by TMA stores) move through maps of [B][S][H][D]
// ordered {D, H, S, B} with boxes of G heads x rows / G queries, so the shared-memory
// tiles hold exactly these rows; K and V are read once per KV head instead of once per
// query head. The mask takes the row's query index (mask_scores' shift), lse its head and
// query. Varlen batches and outputs that TMA cannot map are packed too: Q's map then
// covers the packed tensor ([1][total][H][D]; rows past a sequence's end are computed, not
// stored) and the registers store O (store_output with the head stride).
//
// Persistence (kPersistent, the "_p" keys) is a second compiled variant: the item loop
// costs the main loop ~8% more instructions (ptxas builds some descriptors per thread),
// which the overlap of one item's epilogue with the next one's prologue repays only where
// items are short (H200, S = 512: 1.11-1.24x with the TMA-store epilogue; a dynamic
// scheduler on long causal rows: 0.82-0.94x).
#pragma once

#include <cuda.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <type_traits>

#include "cuda/common/launch.hpp"
#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/common/tma_host.hpp"
#include "cuda/kernels/fwd_sm90_traits.hpp"
#include "cuda/kernels/item_order.hpp"
#include "cuda/kernels/params.hpp"
#include "cuda/parts/epilogue.cuh"
#include "cuda/parts/operands.cuh"
#include "cuda/parts/operands_fp8.cuh"
#include "cuda/parts/seq_mask.cuh"
#include "cuda/parts/softmax.cuh"

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
  constexpr bool kPersistent = Tr::kPersistent;
  constexpr int kPLog2 = Tr::kFp8 ? kFp8PLog2 : 0;  // P stored as e4m3(2^kPLog2 P)
  constexpr int kSlack = Tr::kFp8 ? kFp8Slack : kSoftmaxSlack;  // lazy-rescale slack
  constexpr int kNF = kBlockN / 8, kDF = kHeadDim / 8, kPK = kBlockN / MmaOps<T>::kPVKeys;
  constexpr int kKS = kHeadDim * Tr::kElem / 32;  // Q K^T k-steps of 32 bytes (real columns only)

  extern __shared__ unsigned char smem[];
  const uint32_t sQ = (ptx::smem_addr(smem) + 1023u) & ~1023u;
  const uint32_t sK = sQ + Tr::kTileQ;
  const uint32_t sV = sK + kStages * Tr::kTileKV;
  const uint32_t sRaw = sV + kStages * Tr::kTileKV;  // Tr::kVtIn: V's 64-key sub-tiles
  const uint32_t sObuf = sRaw + (Tr::kVtIn ? Tr::kRawBytes : 0);
  const uint32_t sO = Tr::kTileO > 0 ? sObuf : sQ;  // O's staging (TMA stores, row copies)
  const uint32_t sVtStage = sObuf + Tr::kTileO;     // Tr::kVtFused: the transposing warps' tiles
  const uint32_t bar_q = sVtStage + (Tr::kVtFused ? 3 * Tr::kVtStage : 0);
  auto full_k = [&](int s) { return bar_q + 8u * (1 + s); };
  auto full_v = [&](int s) { return bar_q + 8u * (1 + kStages + s); };
  auto empty_k = [&](int s) { return bar_q + 8u * (1 + 2 * kStages + s); };
  auto empty_v = [&](int s) { return bar_q + 8u * (1 + 3 * kStages + s); };
  const uint32_t empty_q = bar_q + 8u * (1 + 4 * kStages);
  auto raw_full = [&](int s) { return bar_q + 8u * (2 + 4 * kStages + s); };
  auto raw_empty = [&](int s) { return bar_q + 8u * (2 + 4 * kStages + Tr::kRawSlots + s); };

  // kPersistent: as many CTAs as fit on the SMs at once, each walking a static list of
  // work items: in round r, CTA c takes item w = r G + c for even r and r G + G - 1 - c
  // for odd r (G = gridDim.x; a snake order), until w >= items. Item w is (query block,
  // head, batch) as p.order numbers them (params.hpp ItemOrder; the launcher's choice,
  // item_order.hpp): one head's query blocks after another, the heaviest (latest, causal)
  // first, so the CTAs at work at one time share a few heads' K and V in L2 and the snake
  // pairs a CTA's heavy item of one round with a light one in the next; or, under a band
  // mask where that order would load some CTAs with heavy items round after round, every
  // head's last block first, then every head's next one. Producer and consumers compute
  // the same list, so nothing is handed over between them; the producer runs ahead into
  // the next item (its Q once the consumers released the last one's, empty_q; K/V into
  // free stages) while the consumers finish the current one. (Measured on an H200 against
  // a dynamic scheduler with an atomic counter, whose item handoff through shared memory
  // racecheck could not follow: docs/results/cuda-sm90-2026-11-22.md.) The launcher keeps
  // items + G below 2^31.
  constexpr uint32_t kBarEpilogue = 8;  // + cw: the TMA-store epilogue of consumer cw (128 threads)
  // Packed rows per sequence: Sq, or Sq G (GQA packing); an item's head is then its KV head.
  const int shift = p.pack_shift, item_heads = p.heads >> shift;
  const int n_mb = ((p.sq << shift) + kBlockM - 1) / kBlockM, items = n_mb * item_heads * p.batch;
  struct Item {
    int m0, h, b;
  };
  auto item = [&](int w) {
    int blk, hb;
    p.order.decode(w, n_mb, blk, hb);
    const int b = p.div_heads(hb);
    return Item{(n_mb - 1 - blk) * kBlockM, hb - b * item_heads, b};
  };
  // KV splits (p.kv_splits; not persistent): CTA x takes split x % ns of query block
  // x / ns, the split's run of the item's key tiles (kv_run).
  constexpr bool kCanSplit = !kPersistent;
  const int ns = kCanSplit ? p.kv_splits : 1, split_j = kCanSplit ? int(blockIdx.x) % ns : 0;
  auto kv_run = [&](TileRange r) {
    if (kCanSplit && ns > 1) {
      const int per = (r.hi - r.lo + ns - 1) / ns, lo = min(r.hi, r.lo + split_j * per);
      r.hi = min(r.hi, lo + per);
      r.lo = lo;
    }
    return r;
  };
  // An item's key tiles: its band of the sequence's keys (with splits, its split's run).
  auto item_tiles = [&](const Item& w, const SeqInfo& seq) {
    return kv_run(tile_range(band_mask(p, seq), w.m0 >> shift, (min(w.m0 + kBlockM, seq.sq << shift) - 1) >> shift,
                             seq.sk, kBlockN));
  };
  // With splits, kv_combine.cu's launch (a programmatic dependent) may begin at once: it
  // waits for this grid's completion and memory (griddepcontrol.wait) before it reads.
  if constexpr (kCanSplit) {
    if (ns > 1) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
  // Not persistent: the CTA's one item, heavy (late, causal) query blocks launched first.
  const Item own{(int(gridDim.x) / ns - 1 - int(blockIdx.x) / ns) * kBlockM, int(blockIdx.y), int(blockIdx.z)};
  // The CTA's item of round r (both roles walk rounds r = 0, 1, .. until this is false;
  // not persistent: round 0 only). Varlen: a query block past its sequence's end has
  // m0 >= seq.sq and is skipped by both roles alike. (A plain loop: with the item loop
  // in a lambda, ptxas built the wgmma descriptors per thread in the main loop, +11%
  // instructions, 3-4% slower.)
  auto round_item = [&](int r, Item& wi) {
    if constexpr (kPersistent) {
      const int g = int(gridDim.x), c = int(blockIdx.x), w = r * g + ((r & 1) ? g - 1 - c : c);
      if (w >= items) return false;
      wi = item(w);
      return true;
    } else {
      wi = own;
      return r == 0;
    }
  };
  if constexpr (!kPersistent) {
    if (own.m0 >= seq_info(p, own.b).sq << shift) return;  // varlen: past this sequence's end
  }
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    ptx::mbar_init(bar_q, 1);
    ptx::mbar_init(empty_q, 4 * Tr::kConsumers);
    for (int s = 0; s < kStages; ++s) {
      ptx::mbar_init(full_k(s), 1);
      ptx::mbar_init(full_v(s), Tr::kVtIn ? Tr::kVtWarps : 1);
      ptx::mbar_init(empty_k(s), 4 * Tr::kConsumers);  // one arrival per consumer warp
      ptx::mbar_init(empty_v(s), 4 * Tr::kConsumers);
    }
    if constexpr (Tr::kVtIn) {
      for (int s = 0; s < Tr::kRawSlots; ++s) {
        ptx::mbar_init(raw_full(s), 1);
        ptx::mbar_init(raw_empty(s), Tr::kVtWarps);
      }
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
      int it = 0, qi = 0, rs = 0;  // K/V tiles, items and (kVtIn) V sub-tiles so far: ring stages and phases
      Item wi;
      for (int r = 0; round_item(r, wi); ++r) {
        const SeqInfo seq = seq_info(p, wi.b);
        if (wi.m0 >= seq.sq << shift) continue;
        {
          const int hk = shift > 0 ? wi.h : wi.h / p.group;
          const TileRange tiles = item_tiles(wi, seq);
          // Q, once the consumers' last S GEMM of the previous item retired (its buffer free).
          if (kPersistent && qi > 0) ptx::mbar_wait(empty_q, (qi - 1) & 1);
          ptx::mbar_arrive_expect_tx(bar_q, Tr::kTileQ);
          // Packed: heads G hk .., queries m0 / G .. (Q's map is ordered {D, H, S, B}).
          const int q_c1 = shift > 0 ? wi.h << shift : int(seq.q_row0) + wi.m0;
          const int q_c2 = shift > 0 ? int(seq.q_row0) + (wi.m0 >> shift) : wi.h;
#pragma unroll
          for (int c = 0; c < Tr::kColBlocks; ++c)
            ptx::tma_load_4d(sQ + c * kBlockM * 128, &tm_q, bar_q, c * Tr::kColElems, q_c1, q_c2, int(seq.bb));
          for (int n = tiles.lo; n < tiles.hi; ++n, ++it) {
            const int stage = it % kStages;
            const uint32_t off = stage * Tr::kTileKV, parity = ((it / kStages) - 1) & 1;
            if (it >= kStages) ptx::mbar_wait(empty_k(stage), parity);
            ptx::mbar_arrive_expect_tx(full_k(stage), Tr::kTileKV);
#pragma unroll
            for (int c = 0; c < Tr::kColBlocks; ++c)
              ptx::tma_load_4d(sK + off + c * kBlockN * 128, &tm_k, full_k(stage), c * Tr::kColElems,
                               int(seq.k_row0) + n * kBlockN, hk, int(seq.bb));
            if constexpr (Tr::kVtIn) {
              // V's sub-tiles of 64 keys into the raw ring, once the transposing warps
              // released the slot's previous one (they wait for the V^T stage themselves).
              for (int j = 0; j < kBlockN / 64; ++j, ++rs) {
                const int slot = rs % Tr::kRawSlots;
                if (rs >= Tr::kRawSlots) ptx::mbar_wait(raw_empty(slot), ((rs / Tr::kRawSlots) - 1) & 1);
                ptx::mbar_arrive_expect_tx(raw_full(slot), Tr::kRawSub);
#pragma unroll
                for (int c = 0; c < Tr::kColBlocks; ++c)
                  ptx::tma_load_4d(sRaw + slot * Tr::kRawSub + c * 64 * 128, &tm_v, raw_full(slot), c * Tr::kColElems,
                                   int(seq.k_row0) + n * kBlockN + 64 * j, hk, int(seq.bb));
              }
            } else {
              if (it >= kStages) ptx::mbar_wait(empty_v(stage), parity);
              ptx::mbar_arrive_expect_tx(full_v(stage), Tr::kTileKV);
              if constexpr (Tr::kFp8) {  // V^T: kHeadDim rows of 64 keys per column block
                if constexpr (Tr::kVtFused) {
                  // V^T made by the transposing warps (below): before the item's first V^T
                  // load, every unit of its KV head written and fenced (their release, this
                  // acquire, then the fence into the async proxy that TMA reads through).
                  if (p.vt_sync != nullptr && n == tiles.lo) {
                    const unsigned* done = p.vt_sync + 1 + int(seq.bb) * p.vt_kv_heads + hk;
                    while (ptx::ld_acquire_gpu(done) < unsigned(p.vt_head_units)) __nanosleep(64);
                    ptx::fence_proxy_async_global();
                  }
                }
                const int vt0 = p.cu_k != nullptr ? int(fp8_vt_row0(seq.k_row0, wi.b)) : 0;
#pragma unroll
                for (int c = 0; c < kBlockN / 64; ++c)
                  ptx::tma_load_4d(sV + off + c * kHeadDim * 64, &tm_v, full_v(stage), vt0 + n * kBlockN + c * 64, 0,
                                   hk, int(seq.bb));
              } else {
#pragma unroll
                for (int c = 0; c < Tr::kColBlocks; ++c)
                  ptx::tma_load_4d(sV + off + c * kBlockN * 128, &tm_v, full_v(stage), c * 64,
                                   int(seq.k_row0) + n * kBlockN, hk, int(seq.bb));
              }
            }
          }
        }
        ++qi;
      }
    } else if (Tr::kVtFused && threadIdx.x >= 32) {
      // The transposing warps (Tr::kVtFused, where the launcher passed p.vt_sync; fixed-length
      // batches): until the queue p.vt_sync[0] runs out, each takes the next unit of 32 keys
      // x 128 columns of V, numbered head by head in the order the items need them (their
      // KV heads' order, keys ascending), brings it into its shared tile (cp.async, 16-byte
      // pieces along V's rows; keys past Sk zero-filled, as the pre-pass writes them), reads
      // it back with the pre-pass's ldmatrix.x4.trans and byte permutes (vt_fp8.cu: the
      // same V^T bytes, fp8_vt_key's order) and stores the words to the workspace; then it
      // fences them into the async proxy and counts the unit to its head (release). The
      // units do not wait for anything, so every claimed one completes whichever CTAs are
      // resident, and the TMA thread's wait (above) ends.
      if (p.vt_sync != nullptr) {
        const int lane = threadIdx.x % 32, jj = lane / 4, t = lane % 4;
        const uint32_t tile = sVtStage + uint32_t(threadIdx.x / 32 - 1) * Tr::kVtStage;
        constexpr int col_tiles = kHeadDim / 128;  // fp8: Dv == kHeadDim
        const int kv_heads = p.vt_kv_heads, head_units = p.vt_head_units;
        for (;;) {
          int u = 0;
          if (lane == 0) u = int(atomicAdd(p.vt_sync, 1u));
          u = __shfl_sync(0xffffffffu, u, 0);
          if (u >= head_units * kv_heads * p.batch) break;
          const int bh = u / head_units, kb = (u - bh * head_units) / col_tiles;
          const int c0 = (u - bh * head_units - kb * col_tiles) * 128, k0 = kb * 32;
          const int b = bh / kv_heads, hk = bh - b * kv_heads;
          // (Loops not unrolled, pointers stepped: these warps have 24 registers.)
          const uint8_t* src = static_cast<const uint8_t*>(p.v) + b * p.v_sb + hk * p.v_sh + c0 + (lane % 8) * 16;
#pragma unroll 1
          for (int r = lane / 8; r < 32; r += 4) {  // 4 rows of 8 pieces per instruction
            const int key = k0 + r;
            ptx::cp_async_16(tile + r * 144 + (lane % 8) * 16, src + (key < p.sk ? key : 0) * p.v_ss, key < p.sk);
          }
          ptx::cp_async_commit();
          ptx::cp_async_wait<0>();
          __syncwarp();
          // Row d of the workspace's block = column c0 + d of V; bytes k0 .. k0 + 31 = this
          // unit. This lane's rows of column group j16: 16 j16 + ra, 16 j16 + (ra ^ 1).
          const int ra = 2 * jj + (jj < 4 ? 0 : 1);
          uint8_t* pa = static_cast<uint8_t*>(const_cast<void*>(p.vt)) + (int64_t(bh) * p.dv + c0 + ra) * p.vt_sk + k0 + 4 * t;
          const int64_t step = 16 * p.vt_sk, other = (ra & 1) ? -p.vt_sk : p.vt_sk;
#pragma unroll 1
          for (int j16 = 0; j16 < 8; ++j16, pa += step) {  // columns 16 j16 .. + 15
            uint32_t v[4], w[4];
            ptx::ldmatrix_x4_trans(v, tile + lane * 144 + j16 * 16);
            fp8_vt_words(v, jj, w);
            *reinterpret_cast<uint32_t*>(pa) = w[0];
            *reinterpret_cast<uint32_t*>(pa + 16) = w[1];
            *reinterpret_cast<uint32_t*>(pa + other) = w[2];
            *reinterpret_cast<uint32_t*>(pa + other + 16) = w[3];
          }
          ptx::fence_proxy_async_global();
          __syncwarp();  // every lane's stores fenced, and its ldmatrix done before the tile is refilled
          if (lane == 0) ptx::red_release_gpu_add(p.vt_sync + 1 + bh, 1u);
        }
      }
    } else if (Tr::kVtIn && threadIdx.x >= 32) {
      // The transposing warps (Tr::kVtIn): per K/V tile, once the consumers released its V^T
      // stage, each 64-key sub-tile of V from the raw ring becomes column block j of the
      // stage. A unit is 32 keys (half h of the sub-tile) by 16 columns (group j16): one
      // ldmatrix.x4.trans reads it as four 8 x 8 matrices of 16-bit pairs (matrix m: keys
      // 32 h + 8 m .. + 7, lane L giving the row of key 32 h + L, at its 16-byte chunk
      // c16 ^ (key % 8) of the 128-byte-swizzled row), so that lane (jj = L / 4, t = L % 4)
      // holds, for the column pair 2 jj, 2 jj + 1 of the group, keys 8 m + 2t and 8 m + 2t + 1
      // (bytes: key 2t col 2jj, key 2t col 2jj+1, key 2t+1 col 2jj, key 2t+1 col 2jj+1).
      // Two byte permutes of matrices (0, 1) make the words of V^T rows 2 jj and 2 jj + 1 at
      // k positions 4t .. 4t + 3 (keys 2t, 2t + 1, 8 + 2t, 9 + 2t: fp8_vt_key's order), two of
      // (2, 3) those at 16 + 4t .. (fp8_vt_words); one stmatrix.x4 writes the four 8 x
      // 16-byte matrices into the stage's 64-byte-swizzled rows (chunk w of row d at
      // w ^ ((d >> 1) & 3)). Lanes
      // jj >= 4 swap which of their two rows goes to matrices 0/1 and which to 2/3, so each
      // matrix has four even and four odd rows: 32 distinct banks for every store phase (with
      // even rows only, rows jj and jj + 4 met on the same banks). The writes are the generic
      // proxy's: each lane fences them for the async proxy (wgmma) before its warp arrives.
      // Not persistent (kVariant 2): the CTA's one item. Session 27 replaced the 4-byte
      // loads, permutes and stores of session 21 (~50 instructions per 16 bytes per lane)
      // with this: decode B32 H32/8 Sk16384 D128 (H200) 281-300 -> 267-270 us, Sk4096
      // 78-80 -> 75-79; the 128-row tiles with it still ran 0.70-0.80x of the pre-pass
      // (docs/results/cuda-sm90-fp8-2026-11-22.md, session 27).
      const int tw = threadIdx.x / 32 - 1, lane = threadIdx.x % 32;
      const int jj = lane / 4, mi = lane / 8, ri = lane % 8;
      // This lane's stmatrix row: matrix mi's row ri: V^T row 2 ri + parity, chunk 2 h + (mi & 1).
      const int par = (mi < 2) == (ri >= 4) ? 1 : 0;
      const uint32_t st_row = uint32_t(2 * ri + par) * 64, st_w = uint32_t(mi & 1), st_sw = uint32_t(ri & 3);
      const uint32_t ld_row = uint32_t(lane) * 128, ld_sw = uint32_t(lane & 7);
      constexpr int kSub = kBlockN / 64;               // sub-tiles per K/V tile
      constexpr int kUnits = 2 * (kHeadDim / 16);      // (h, j16) per sub-tile
      const SeqInfo seq = seq_info(p, own.b);
      const TileRange tiles = item_tiles(own, seq);
#pragma unroll 1
      for (int it = 0, rs = 0; it < tiles.hi - tiles.lo; ++it) {  // K/V tile it, sub-tiles rs of the raw ring
        const int stage = it % kStages;
        if (it >= kStages) ptx::mbar_wait(empty_v(stage), ((it / kStages) - 1) & 1);
#pragma unroll 1
        for (int j = 0; j < kSub; ++j, ++rs) {
          const int slot = rs % Tr::kRawSlots;
          ptx::mbar_wait(raw_full(slot), (rs / Tr::kRawSlots) & 1);
          const uint32_t src = sRaw + slot * Tr::kRawSub, dst = sV + stage * Tr::kTileKV + j * kHeadDim * 64;
#pragma unroll 2
          for (int u = tw; u < kUnits; u += Tr::kVtWarps) {
            const uint32_t h = u & 1, j16 = u >> 1, cb = j16 / 8, c16 = j16 % 8;
            uint32_t v[4];
            ptx::ldmatrix_x4_trans(v, src + cb * 64 * 128 + h * 32 * 128 + ld_row + ((c16 ^ ld_sw) << 4));
            uint32_t wd[4];
            fp8_vt_words(v, jj, wd);
            const uint32_t w = 2 * h + st_w;
            ptx::stmatrix_x4(dst + j16 * 16 * 64 + st_row + ((w ^ st_sw) << 4), wd[0], wd[1], wd[2], wd[3]);
          }
          ptx::fence_proxy_async();
          __syncwarp();
          if (lane == 0) {
            ptx::mbar_arrive(raw_empty(slot));
            if (j == kSub - 1) ptx::mbar_arrive(full_v(stage));
          }
        }
      }
    }
  } else {
    ptx::setmaxnreg_inc<Tr::kConsumerRegs>();
    using Op = MmaOps<T>;
    const int cw = wg - 1;  // this warpgroup's 64 rows: [64 cw, 64 cw + 64) of the block
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    int it0 = 0;  // K/V tiles so far (as the producer counts them)
    // Ping-pong turns: each barrier 1 + c is counted over the 256 threads of the two
    // warpgroups involved (consumer c syncs, consumer c - 1 arrives). The turns run on
    // from one item to the next: the last consumer opens barrier 1 once, here, so consumer
    // 0 goes first; every turn hands over, and consumer 0 takes the one hand-over left after
    // the item loop, so every barrier sees as many arrivals as syncs. A consumer may thus
    // begin the next item's first S GEMM as soon as the other issued its last P V, while
    // that one runs its epilogue (the turns restarted with each item until session 17, so
    // one warpgroup's epilogue left the tensor cores idle).
    constexpr uint32_t kPPThreads = 256;
    if constexpr (Tr::kPingPong) {
      if (cw == Tr::kConsumers - 1) ptx::named_bar_arrive(1, kPPThreads);
    }
    Item wi;
    for (int r = 0, qi = 0; round_item(r, wi); ++r) {  // qi: items so far
      const SeqInfo seq = seq_info(p, wi.b);
      if (wi.m0 >= seq.sq << shift) continue;
      const TileRange tiles = item_tiles(wi, seq);
      // This lane's (packed) rows: row0, row0 + 8; their queries are row >> shift.
      const int row0 = wi.m0 + 64 * cw + 16 * warp + g;
      const Band32 band{p.window_left, p.window_right, seq.sk - seq.sq, seq.sk};
      // fp8: this item's factors, p's per-tensor ones times its (batch, KV head) entries of
      // the per-head arrays that are given (a packed item's head is its KV head).
      // 16-bit: p.scale_log2 read where it is used, as before the per-head factors.
      float item_scale_log2 = p.scale_log2, o_scale = p.o_scale;
      if constexpr (Tr::kFp8) {
        const int64_t hi = seq.bb * (p.heads / p.group) + (shift > 0 ? wi.h : wi.h / p.group);
        if (p.q_descale_heads != nullptr) item_scale_log2 *= p.q_descale_heads[hi];
        if (p.k_descale_heads != nullptr) item_scale_log2 *= p.k_descale_heads[hi];
        if (p.v_descale_heads != nullptr) o_scale *= p.v_descale_heads[hi];
      }
      auto scale_log2 = [&] {
        if constexpr (Tr::kFp8) return item_scale_log2;
        else return p.scale_log2;
      };

      float acc[1][kDF][4];  // O, unnormalized
      uint32_t qa[Tr::kQRegs ? kKS : 1][4];  // Tr::kQRegs: Q's A fragments (below)
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
      // docs/results/cuda-sm90-2026-11-22.md). With two P buffers (Tr::kSpeculate) P_n is
      // written into the one P V does not read, before wait<0>, by the speculative softmax
      // (OnlineSoftmax::try_update). K and V stages are released separately.
      // The wait<0> is wgmma_wait_after the row sums: ptxas hoisted a plain one above the
      // softmax, which then never overlapped its own P V (session 6 in the results file).
      auto issue_qk = [&](float (&s)[1][kNF][4], uint32_t off) {
        const uint64_t da0 = ptx::desc_sw128(sQ + cw * 64 * 128, 16, 1024), db0 = ptx::desc_sw128(sK + off, 16, 1024);
        ptx::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kKS; ++ks) {
          // k-step ks reads 32 bytes of column block ks / 4 (the swizzle is applied by the
          // hardware to the full address, so the start just moves by 32 bytes).
          // Descriptors as base + offset (ptx::desc_add): one base per call instead of the
          // address arithmetic per k-step.
          const uint32_t cb = ks / 4, kb = (ks % 4) * 32;
          const uint64_t da = ptx::desc_add(da0, cb * kBlockM * 128 + kb);
          const uint64_t db = ptx::desc_add(db0, cb * kBlockN * 128 + kb);
          if constexpr (Tr::kQRegs) {
            if (ks == 0)
              ptx::wgmma_rs_zero<kBlockN, T>(s[0], qa[0], db);
            else
              ptx::wgmma_rs<kBlockN, T>(s[0], qa[ks], db, 1);
          } else if (ks == 0) {
            ptx::wgmma_ss_zero<kBlockN, T>(s[0], da, db);
          } else {
            ptx::wgmma_ss<kBlockN, T>(s[0], da, db, 1);
          }
        }
        ptx::wgmma_commit();
      };
      auto issue_pv = [&](const uint32_t (&pa)[kPK][4], uint32_t off) {
        const uint64_t dv0 = Tr::kFp8 ? ptx::desc_sw64(sV + off, 16, 512) : ptx::desc_sw128(sV + off, kBlockN * 128, 1024);
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
      };
      auto to_operand = [&](const float (&s)[1][kNF][4], uint32_t (&pa)[kPK][4]) {
#pragma unroll
        for (int pk = 0; pk < kPK; ++pk) Op::p_operand(pa[pk], s[0], pk);
      };
      // Mask + online softmax of tile n's scores; returns whether O needs the rescale by
      // corr. spec (a tile after the rows' first): try_update packs P against the max in
      // use into pa chunk by chunk and keeps s; where a max moved past the slack, update.
      // update writes P in place in s; with two P buffers (Tr::kSpeculate) it is packed into
      // pa at once, else by the caller once the in-flight P V that reads pa is retired.
      auto softmax = [&](float (&s)[1][kNF][4], int n, float (&corr)[2], uint32_t (&pa)[kPK][4], bool spec) {
        mask_scores<1, kNF>(s, n >= tiles.full_lo && n < tiles.full_hi, scale_log2(), band, row0, n * kBlockN, t,
                            shift);
        const float e = scale_log2() > 0.f ? scale_log2() : 1.f;
        if (spec && sm.template try_update<kNF, kNF / kPK, kPLog2, kSlack, kChord>(
                        s, e, [&](const float (&pf)[kNF][4], int c) { Op::p_operand(pa[c], pf, c); }))
          return false;
        sm.template update<1, kNF, kPLog2, kSlack>(s, e, corr);
        if constexpr (Tr::kSpeculate) to_operand(s, pa);
        return true;
      };
      auto release = [&](uint32_t bar) {
        if (lane == 0) ptx::mbar_arrive(bar);
      };
      // Ping-pong turns (kPingPong): consumer cw waits on named barrier 1 + cw and hands the
      // turn to the next one (barrier 1 + (cw + 1) % kConsumers); see kPPThreads above.
      auto turn_begin = [&]() {
        if constexpr (Tr::kPingPong) ptx::named_bar_sync(1 + cw, kPPThreads);
      };
      auto turn_end = [&]() {
        if constexpr (Tr::kPingPong) ptx::named_bar_arrive(1 + (cw + 1) % Tr::kConsumers, kPPThreads);
      };

      ptx::mbar_wait(bar_q, qi & 1);
      // Tr::kQRegs: Q's m16n8k32 A fragments of k-step ks (bytes 32 ks ..) by one ldmatrix.x4
      // each: matrix j = rows 8 (j % 2) .. of the warp's 16, bytes 16 (j / 2) .. of the step
      // (lane L addresses row L % 8 of matrix L / 8, at its swizzled 16-byte chunk). Q's
      // buffer is then released at once (persistent: the producer loads the next item's Q
      // while this one runs).
      if constexpr (Tr::kQRegs) {
        const int mi = lane / 8, r = 64 * cw + 16 * warp + lane % 8 + 8 * (mi % 2);
#pragma unroll
        for (int ks = 0; ks < kKS; ++ks) {
          const int c16 = (ks % 4) * 2 + mi / 2;
          ptx::ldmatrix_x4(qa[ks], sQ + (ks / 4) * kBlockM * 128 + r * 128 + ((c16 ^ (r % 8)) << 4));
        }
        if constexpr (kPersistent) {
          __syncwarp();  // every lane's reads before lane 0's release (the producer's TMA overwrites Q)
          release(empty_q);
        }
      }
      // P operands: with Tr::kSpeculate two register buffers, the softmax of tile n writing
      // P_n into one while the P V of tile n - 1, issued just before, reads P_{n-1} from the
      // other (nothing the in-flight wgmma reads is touched: no C7513 serialization), the
      // key loop unrolled by two so that they swap roles without copies. Otherwise pa0 alone,
      // P_n packed into it after P_{n-1} V_{n-1} retires (pa1 is never used: no registers).
      uint32_t pa0[kPK][4], pa1[kPK][4];
      float corr[2];
      if (tiles.lo < tiles.hi) {
        float s[1][kNF][4];
        const int stage = it0 % kStages;
        ptx::mbar_wait(full_k(stage), (it0 / kStages) & 1);
        turn_begin();
        issue_qk(s, stage * Tr::kTileKV);
        turn_end();
        ptx::wgmma_wait<0>();
        ptx::fence_regs(s[0]);
        release(empty_k(stage));
        softmax(s, tiles.lo, corr, pa0, false);  // corr of the first tile multiplies O = 0: unused
        if constexpr (!Tr::kSpeculate) to_operand(s, pa0);
      }
      // Tile n (it: this CTA's K/V tile count at tile n): P_{n-1} in pprev, P_n into pcur
      // (the same buffer unless speculative).
      auto step = [&](int n, int it, const uint32_t (&pprev)[kPK][4], uint32_t (&pcur)[kPK][4]) {
        const int stage = it % kStages, prev = (it - 1) % kStages;
        float s[1][kNF][4];
        ptx::mbar_wait(full_k(stage), (it / kStages) & 1);
        ptx::mbar_wait(full_v(prev), ((it - 1) / kStages) & 1);
        turn_begin();
        issue_qk(s, stage * Tr::kTileKV);
        issue_pv(pprev, prev * Tr::kTileKV);
        turn_end();
        ptx::wgmma_wait<1>();  // S_n
        ptx::fence_regs(s[0]);
        release(empty_k(stage));
        const bool moved = softmax(s, n, corr, pcur, Tr::kSpeculate);
        ptx::wgmma_wait_after<0>(sm.l[0], sm.l[1]);  // P_{n-1} V_{n-1}, once the softmax is done
        ptx::fence_regs(acc[0]);
        if constexpr (!Tr::kSpeculate) ptx::fence_regs(s[0]);  // P_n's conversion stays below the wait
        release(empty_v(prev));
        if (moved) rescale_rows<1, kDF>(acc, corr);
        if constexpr (!Tr::kSpeculate) to_operand(s, pcur);
      };
      int n = tiles.lo + 1, it = it0 + 1;
      bool last_in_pa1 = false;
      if constexpr (Tr::kSpeculate) {
        for (; n + 1 < tiles.hi; n += 2, it += 2) {
          step(n, it, pa0, pa1);
          step(n + 1, it + 1, pa1, pa0);
        }
        last_in_pa1 = n < tiles.hi;
        if (last_in_pa1) {
          step(n, it, pa0, pa1);
          ++it;
        }
      } else {
        for (; n < tiles.hi; ++n, ++it) step(n, it, pa0, pa0);
      }
      // Every S of this item retired: Q's buffer is free.
      if constexpr (kPersistent && !Tr::kQRegs) release(empty_q);
      auto last_pv = [&](const uint32_t (&pl)[kPK][4]) {
        const int prev = (it - 1) % kStages;
        ptx::mbar_wait(full_v(prev), ((it - 1) / kStages) & 1);
        turn_begin();
        issue_pv(pl, prev * Tr::kTileKV);
        turn_end();
        ptx::wgmma_wait<0>();
        ptx::fence_regs(acc[0]);
        release(empty_v(prev));
      };
      if (tiles.lo < tiles.hi) {
        if (last_in_pa1) {  // always false without speculation
          last_pv(pa1);
        } else {
          last_pv(pa0);
        }
      }

      it0 += tiles.hi > tiles.lo ? tiles.hi - tiles.lo : 0;

      sm.finish();
      if constexpr (Tr::kFp8) {  // O * v_descale; l carries 2^kPLog2 (O too: they cancel), lse not
        sm.m[0] -= kPLog2;
        sm.m[1] -= kPLog2;
        const float os[2] = {o_scale, o_scale};
        rescale_rows<1, kDF>(acc, os);
      }
      if (kCanSplit && ns > 1) {
        // This split's unnormalized rows and their (m, l) for kv_combine.cu, row
        // (j R + the query's row in O's [B Sq] or varlen [total] rows) H + head, R = o_rows().
        const int64_t rows_o = p.o_rows();
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int prow = row0 + 8 * half, qrow = prow >> shift, hq = (wi.h << shift) | (prow & ((1 << shift) - 1));
          if (qrow >= seq.sq) continue;
          const int64_t r = (split_j * rows_o + seq.bb * p.sq + seq.q_row0 + qrow) * p.heads + hq;
          float* po = p.part_o + r * p.dv;
#pragma unroll
          for (int df = 0; df < kDF; ++df)
            if (df * 8 < p.dv)
              *reinterpret_cast<float2*>(po + df * 8 + 2 * t) = make_float2(acc[0][df][2 * half], acc[0][df][2 * half + 1]);
          if (t == 0) p.part_ml[r] = make_float2(sm.m[half], sm.l[half]);
        }
        ++qi;
        continue;  // not persistent: the CTA's only item
      }
      // The item's first query head (packed: the first of its KV head's G heads).
      const int h0 = wi.h << shift;
      float* glse = p.lse == nullptr ? nullptr : p.lse + seq.bb * p.lse_sb + h0 * p.lse_sh + seq.q_row0;
      // O's elements (16-bit: T, or for fp8 f16 / bf16 as asked, one epilogue for both with
      // the conversion chosen at run time) and their conversion.
      using O = std::conditional_t<Tr::kFp8, __half, T>;
      const auto pack = [&] {
        if constexpr (Tr::kFp8)
          return ptx::Pack16{p.out_bf16};
        else
          return ptx::PackAs<T>{};
      }();
      auto store = [&] {  // from registers (kernels without a staging buffer)
        O* go = static_cast<O*>(p.o) + seq.bb * p.o_sb + seq.q_row0 * p.o_ss + h0 * p.o_sh;
        // Packed rows on their own call: with the head stride in the one call, ptxas moved
        // two of the persistent hd128 kernels' spills into the main loop (sass_check).
        if (shift > 0)
          store_output<O, kDF>(acc[0], sm.m, sm.l, go, p.o_ss, glse, row0, seq.sq, p.dv, t, shift, p.o_sh, p.lse_sh,
                               pack);
        else
          store_output<O, kDF>(acc[0], sm.m, sm.l, go, p.o_ss, glse, row0, seq.sq, p.dv, t, 0, 0, 0, pack);
      };
      // Through shared memory (Tr::kOStaged): O / l into this warpgroup's rows of sO (16-bit,
      // one item per CTA: Q's buffer; persistent or fp8: a buffer of its own, once the last
      // item's rows were read out of it) in Q's 16-bit swizzled layout (16-byte chunk c of
      // local row r at c ^ (r % 8), conflict-free for the fragments' stores), lse from
      // registers; then either one thread stores the boxes of 64 rows by TMA (tma: the
      // launcher mapped O) or the warpgroup's threads copy the rows out, 16 bytes per
      // thread and copy, consecutive threads along a row (4-byte stores where O's base or
      // strides are not 16-byte aligned), skipping rows past the sequence's end (varlen,
      // the last block) and columns past Dv (16-bit kernels; in place of the register
      // stores' scattered 4-byte pieces: 1.01-1.06x, session 28). kPassBlocks column
      // blocks per pass (Tr::kOPasses: the buffer holds that many; each pass after the
      // first, and the next item's first, waits until the last one's rows were read out).
      auto store_smem = [&](bool tma) {
        constexpr int kPassBlocks = Tr::kOColBlocks / Tr::kOPasses, kPassDF = kDF / Tr::kOPasses;
        const uint32_t base = sO + cw * 64 * 128;
        // One stmatrix x4 per two 8-column fragments: matrices (df, rows g), (df, rows g + 8),
        // (df + 1, g), (df + 1, g + 8); lane 8 j + i gives row i of matrix j, local row
        // lr = 16 warp + i + 8 (j % 2) (so lr % 8 == i), 16-byte chunk (df % 8 + j / 2) ^ i
        // = (df % 8) ^ c with c = (j / 2) ^ i (df even). A quarter of the store instructions
        // of one 32-bit store per fragment pair: the S512 hd128 rows 1.00-1.02x (H200).
        const int j = lane / 8, i = lane % 8, c = (j / 2) ^ i;
        const uint32_t lane_base = base + (16 * warp + i + 8 * (j % 2)) * 128;
        const float inv0 = sm.l[0] > 0.f ? 1.f / sm.l[0] : 0.f, inv1 = sm.l[1] > 0.f ? 1.f / sm.l[1] : 0.f;
        const int tw = threadIdx.x % 128;
#pragma unroll
        for (int ps = 0; ps < Tr::kOPasses; ++ps) {
          if (kPersistent || ps > 0) {
            if (tw == 0) ptx::tma_store_wait_read();
            ptx::named_bar_sync(kBarEpilogue + cw, 128);
          }
#pragma unroll
          for (int df = ps * kPassDF; df < (ps + 1) * kPassDF; df += 2)
            ptx::stmatrix_x4(lane_base + (df / 8 - ps * kPassBlocks) * kBlockM * 128 + (((df % 8) ^ c) << 4),
                             pack(acc[0][df][0] * inv0, acc[0][df][1] * inv0),
                             pack(acc[0][df][2] * inv1, acc[0][df][3] * inv1),
                             pack(acc[0][df + 1][0] * inv0, acc[0][df + 1][1] * inv0),
                             pack(acc[0][df + 1][2] * inv1, acc[0][df + 1][3] * inv1));
          if (ps == 0) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              // Packed row prow is query prow >> shift of head (h << shift) | (prow & (G - 1))
              // (unpacked: query prow of head h).
              const int prow = row0 + 8 * half, qrow = prow >> shift, hq = (wi.h << shift) | (prow & ((1 << shift) - 1));
              if (p.lse != nullptr && t == 0 && qrow < seq.sq)
                p.lse[seq.bb * p.lse_sb + hq * p.lse_sh + seq.q_row0 + qrow] = row_lse(sm.m[half], sm.l[half]);
            }
          }
          if (tma) {
            ptx::fence_proxy_async();
            ptx::named_bar_sync(kBarEpilogue + cw, 128);
            if (tw == 0) {
#pragma unroll
              for (int cb = ps * kPassBlocks; cb < (ps + 1) * kPassBlocks; ++cb)
                ptx::tma_store_4d(&tm_o, base + (cb - ps * kPassBlocks) * kBlockM * 128, cb * 64,
                                  shift > 0 ? wi.h << shift : wi.m0 + 64 * cw, shift > 0 ? (wi.m0 + 64 * cw) >> shift : wi.h,
                                  int(seq.bb));
              ptx::tma_store_commit();
            }
          } else {
            ptx::named_bar_sync(kBarEpilogue + cw, 128);
            O* go = static_cast<O*>(p.o) + seq.bb * p.o_sb + seq.q_row0 * p.o_ss + h0 * p.o_sh;
            const bool vec16 =
                ((reinterpret_cast<uintptr_t>(p.o) | uint64_t(p.o_sb | p.o_ss | p.o_sh) * sizeof(O)) & 15) == 0;
            constexpr int kRowChunks = kPassBlocks * 8;  // 16-byte chunks of a row in this pass
#pragma unroll 4
            for (int x = tw; x < 64 * kRowChunks; x += 128) {
              const int r = x / kRowChunks, cb = (x % kRowChunks) / 8, c16 = x % 8;
              const int prow = wi.m0 + 64 * cw + r, qrow = prow >> shift, col = (ps * kPassBlocks + cb) * 64 + c16 * 8;
              if (qrow >= seq.sq || col >= p.dv) continue;
              const uint4 v = ptx::lds128(base + cb * kBlockM * 128 + r * 128 + ((c16 ^ (r % 8)) << 4));
              O* dst = go + qrow * p.o_ss + (prow & ((1 << shift) - 1)) * p.o_sh + col;
              if (vec16) {
                *reinterpret_cast<uint4*>(dst) = v;
              } else {
                uint32_t* d4 = reinterpret_cast<uint32_t*>(dst);
                d4[0] = v.x;
                d4[1] = v.y;
                d4[2] = v.z;
                d4[3] = v.w;
              }
            }
          }
        }
      };
      // 16-bit: TMA stores or the threads' row copies. fp8: TMA stores, else from registers
      // (with the row copies in the fp8 kernels, the persistent hd128 128x192 one ran 3-5 %
      // slower on H200 in its TMA path too, same main-loop SASS: code layout; session 28).
      if constexpr (Tr::kOStaged && !Tr::kFp8)
        store_smem(p.o_tma);
      else if (Tr::kOStaged && p.o_tma)
        store_smem(true);
      else
        store();
      ++qi;
    }  // work items
    if constexpr (Tr::kPingPong) {
      if (cw == 0) ptx::named_bar_sync(1, kPPThreads);  // the last hand-over (or the opening)
    }
    if (threadIdx.x % 128 == 0) ptx::tma_store_wait_read();  // O's last boxes read out of shared memory
  }
#endif
}

// Host launcher: tensor maps of Q, K, V ([B][S][H][D] by strides, any order; D must be
// kHeadDim), then the launch on the caller's stream. Varlen: the maps cover the packed
// tensors ([1][total][H][D]); a sequence's tiles start at its first row, and rows of the
// next sequence that a tile reaches are masked (keys) or not stored (queries).
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kStages, int kVariant>
cudaError_t launch_fwd_sm90(const FwdParams& p, cudaStream_t stream) {
  using Tr = FwdSm90Traits<T, kHeadDim, kBlockM, kBlockN, kStages, kVariant>;
  constexpr bool kPersistent = Tr::kPersistent;
  if (p.d != kHeadDim || p.dv != kHeadDim) return cudaErrorInvalidValue;
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
  if (g > 1 && (g > 64 || kBlockM % g != 0)) return cudaErrorInvalidValue;
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
    e = row_map(&tq, bf16, p.q, p.d, p.q_ss, p.q_sh, p.q_sb, kBlockM);
    if (e == cudaSuccess)
      e = make_tma_16bit_4d(&tk, bf16, p.k, p.d, rows_k, kv_heads, nb, p.k_ss, p.k_sh, p.k_sb, kBlockN);
    if (e == cudaSuccess)
      e = make_tma_16bit_4d(&tv, bf16, p.v, p.dv, rows_k, kv_heads, nb, p.v_ss, p.v_sh, p.v_sb, kBlockN);
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
