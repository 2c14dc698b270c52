// The fp8 forward's V^T made by the producer warpgroup's three spare warps (the TMA thread is
// lane 0 of warp 0). fp8 wgmma reads its B operand K-major only, so P V needs V^T, with the
// keys of every 32 in parts/fp8.hpp's order (fp8_vt_key: the S accumulator's, so that P is
// packed to e4m3 in registers without shuffles). Two forms besides the pre-pass (vt_fp8.cu):
//
// FusedVtTransposer (FwdSm90Config::kVtFused: persistent hd128 kernels on fixed-length
// batches, where the launcher passed p.vt_sync): until the queue p.vt_sync[0] runs out, each
// warp takes the next unit of 32 keys x 128 columns of V, numbered head by head in the order
// the items need them (their KV heads' order, keys ascending), brings it into its shared tile
// (cp.async, 16-byte pieces along V's rows; keys past Sk zero-filled, as the pre-pass writes
// them), cleans its NaN and records them as the pre-pass does (FwdParams::vt_bad), reads it
// back with the pre-pass's ldmatrix.x4.trans and byte permutes (the same V^T bytes) and
// stores the words to the workspace; then it fences them into the async proxy and
// counts the unit to its head (release). The units do not wait for anything, so every
// claimed one completes whichever CTAs are resident, and the TMA thread's wait (load.cuh:
// wait_vt_head) ends.
//
// RingVtTransposer (FwdSm90Config::kVtIn, the "_vt" 64-row kernels, one item per CTA): per
// K/V tile, once the consumers released its V^T stage, each 64-key sub-tile of V from the
// raw ring becomes column block j of the stage. A unit is 32 keys (half h of the sub-tile) by
// 16 columns (group j16): one ldmatrix.x4.trans reads it as four 8 x 8 matrices of 16-bit
// pairs (matrix m: keys 32 h + 8 m .. + 7, lane L giving the row of key 32 h + L, at its
// 16-byte chunk c16 ^ (key % 8) of the 128-byte-swizzled row), so that lane (jj = L / 4,
// t = L % 4) holds, for the column pair 2 jj, 2 jj + 1 of the group, keys 8 m + 2t and
// 8 m + 2t + 1 (bytes: key 2t col 2jj, key 2t col 2jj+1, key 2t+1 col 2jj, key 2t+1 col
// 2jj+1). Two byte permutes of matrices (0, 1) make the words of V^T rows 2 jj and 2 jj + 1
// at k positions 4t .. 4t + 3 (keys 2t, 2t + 1, 8 + 2t, 9 + 2t: fp8_vt_key's order), two of
// (2, 3) those at 16 + 4t .. (fp8_vt_words); one stmatrix.x4 writes the four 8 x 16-byte
// matrices into the stage's 64-byte-swizzled rows (chunk w of row d at w ^ ((d >> 1) & 3)).
// Lanes jj >= 4 swap which of their two rows goes to matrices 0/1 and which to 2/3, so each
// matrix has four even and four odd rows: 32 distinct banks for every store phase (with even
// rows only, rows jj and jj + 4 met on the same banks). The writes are the generic proxy's:
// each lane fences them for the async proxy (wgmma) before its warp arrives. The history of
// this transposer (4-byte permutes first, then this: 2026-11-27) is in
// docs/results/cuda-sm90-fp8-2026-11-22.md.
#pragma once

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/kernels/params.hpp"
#include "cuda/kernels/sm90/pipeline.cuh"
#include "cuda/kernels/sm90/smem.cuh"
#include "cuda/kernels/sm90/bad_keys.cuh"
#include "cuda/parts/fp8.hpp"
#include "cuda/parts/nonfinite_v.cuh"

namespace flashcore::cuda::sm90 {

template <class Tr>
struct FusedVtTransposer {
  static constexpr int kHeadDim = Tr::kHeadDim;
  SmemLayout<Tr> s;

  // V's NaN in the unit staged at `tile` (32 rows of 128 bytes, 144 apart): lane L's row (key
  // k0 + L) cleaned in place, and the unit's word of the record (FwdParams::vt_bad, the
  // pre-pass's: parts/nonfinite_v.cuh) written, with head bh's NaN flag (vt_sync) where it
  // is not 0.
  __device__ __forceinline__ void record_nan(const FwdParams& p, uint32_t tile, int lane, int bh, int c0, int k0) const {
    bool bad = false;
#pragma unroll 1
    for (int c = 0; c < 8; ++c) bad |= clean_16_bytes<__nv_fp8_e4m3>(tile + uint32_t(lane) * 144u + uint32_t(c) * 16u);
    const uint32_t w = __ballot_sync(0xffffffffu, bad);
    if (lane == 0) {
      p.fp8_bad_words(bh, c0 / 128)[k0 / 32] = w;
      if (w != 0) p.vt_sync[3 + 2 * bh] = 1u;  // before the unit's release (run)
    }
    __syncwarp();  // the cleaned rows, before ldmatrix reads them
  }

  __device__ __forceinline__ void run(const FwdParams& p) const {
    if constexpr (Tr::kVtFused) {
      const int lane = threadIdx.x % 32, jj = lane / 4, t = lane % 4;
      const uint32_t tile = s.vt_tiles + uint32_t(threadIdx.x / 32 - 1) * Tr::kVtStage;
      constexpr int col_tiles = kHeadDim / 128;  // fp8: Dv == kHeadDim, a multiple of 128
      const int kv_heads = p.vt_kv_heads, head_units = p.vt_head_units;
      for (;;) {
        int u = 0;
        if (lane == 0) u = int(atomicAdd(p.vt_sync, 1u));
        u = __shfl_sync(0xffffffffu, u, 0);
        if (u >= p.vt_units) break;
        const int bh = u / head_units, kb = (u - bh * head_units) / col_tiles;
        const int c0 = (u - bh * head_units - kb * col_tiles) * 128, k0 = kb * 32;
        const int b = bh / kv_heads, hk = bh - b * kv_heads;
        // (Loops not unrolled, pointers stepped, the queue's end read from p: these warps
        // have 24 registers, and ptxas spilled the end computed here.)
        const uint8_t* src = static_cast<const uint8_t*>(p.v) + b * p.v_sb + hk * p.v_sh + c0 + (lane % 8) * 16;
#pragma unroll 1
        for (int r = lane / 8; r < 32; r += 4) {  // 4 rows of 8 pieces per instruction
          const int key = k0 + r;
          ptx::cp_async_16(tile + r * 144 + (lane % 8) * 16, src + (key < p.sk ? key : 0) * p.v_ss, key < p.sk);
        }
        ptx::cp_async_commit();
        ptx::cp_async_wait<0>();
        __syncwarp();
        record_nan(p, tile, lane, bh, c0, k0);
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
        if (lane == 0) ptx::red_release_gpu_add(p.vt_sync + 2 + 2 * bh, 1u);
      }
    }
  }
};

template <class Tr>
struct RingVtTransposer {
  static constexpr int kHeadDim = Tr::kHeadDim, kBlockN = Tr::kBlockN;
  SmemLayout<Tr> s;

  // The key tiles `tiles` of the CTA's one item.
  __device__ __forceinline__ void run(TileRange tiles) const {
    const int tw = threadIdx.x / 32 - 1, lane = threadIdx.x % 32;
    const int jj = lane / 4, mi = lane / 8, ri = lane % 8;
    // This lane's stmatrix row: matrix mi's row ri: V^T row 2 ri + parity, chunk 2 h + (mi & 1).
    const int par = (mi < 2) == (ri >= 4) ? 1 : 0;
    const uint32_t st_row = uint32_t(2 * ri + par) * 64, st_w = uint32_t(mi & 1), st_sw = uint32_t(ri & 3);
    const uint32_t ld_row = uint32_t(lane) * 128, ld_sw = uint32_t(lane & 7);
    constexpr int kSub = kBlockN / 64;           // sub-tiles per K/V tile
    constexpr int kUnits = 2 * (kHeadDim / 16);  // (h, j16) per sub-tile
    const Pipeline<Tr::kStages> v = s.v_pipe();
    const Pipeline<Tr::kRawSlots> raw = s.raw_pipe();
    // The cut tiles: it < fl and it >= fh (the item's tiles outside [full_lo, full_hi)).
    const int fl = tiles.full_lo - tiles.lo, fh = tiles.full_hi - tiles.lo;
#pragma unroll 1
    for (int it = 0, rs = 0; it < tiles.hi - tiles.lo; ++it) {  // K/V tile it, sub-tiles rs of the raw ring
      const PipelineState<Tr::kStages> st{it};
      const bool cut_tile = it < fl || it >= fh;
      v.producer_acquire(st);
#pragma unroll 1
      for (int j = 0; j < kSub; ++j, ++rs) {
        const PipelineState<Tr::kRawSlots> rst{rs};
        raw.consumer_wait(rst);
        const uint32_t src = s.raw + rst.stage() * Tr::kRawSub, dst = s.v + st.stage() * Tr::kTileKV + j * kHeadDim * 64;
        // Unit u of the sub-tile; clean: its NaN set to 0 first. Returns the or of its bytes.
        auto unit = [&](int u, bool clean) {
          const uint32_t h = u & 1, j16 = u >> 1, cb = j16 / 8, c16 = j16 % 8;
          uint32_t vv[4];
          ptx::ldmatrix_x4_trans(vv, src + cb * 64 * 128 + h * 32 * 128 + ld_row + ((c16 ^ ld_sw) << 4));
          const uint32_t seen = vv[0] | vv[1] | vv[2] | vv[3];
          if (clean) {
#pragma unroll
            for (int m = 0; m < 4; ++m) vv[m] = zero_flagged<__nv_fp8_e4m3>(vv[m], nonfinite_bits<__nv_fp8_e4m3>(vv[m]));
          }
          uint32_t wd[4];
          fp8_vt_words(vv, jj, wd);
          const uint32_t w = 2 * h + st_w;
          ptx::stmatrix_x4(dst + j16 * 16 * 64 + st_row + ((w ^ st_sw) << 4), wd[0], wd[1], wd[2], wd[3]);
          return seen;
        };
        uint32_t seen = 0;
#pragma unroll 2
        for (int u = tw; u < kUnits; u += Tr::kVtWarps) seen |= unit(u, false);
        // A tile the band or Sk cuts, with a NaN (a NaN byte makes its byte of the or look NaN
        // too: a cheap test, rarely passed): its units again, cleaned (the raw sub-tile is
        // still there), and the item tagged (BadKeys) for the consumers' fix-up, which then
        // looks at every key of the cut tiles (parts/nonfinite_v.cuh). Tiles every row sees
        // whole keep their NaN.
        // The tag is written by the lane that then releases the tile (its arrive below): the
        // consumers read it after their wait on the tile's full barrier.
        const bool cleaned = __any_sync(0xffffffffu, cut_tile && nonfinite_bits<__nv_fp8_e4m3>(seen) != 0);
        if (cleaned) {
#pragma unroll 1
          for (int u = tw; u < kUnits; u += Tr::kVtWarps) unit(u, true);
        }
        ptx::fence_proxy_async();
        __syncwarp();
        if (lane == 0) {
          if (cleaned) BadKeys<Tr>{s.bad}.mark(0);
          ptx::mbar_arrive(raw.empty(rst.stage()));
          if (j == kSub - 1) v.producer_commit(st);
        }
      }
    }
  }
};

}  // namespace flashcore::cuda::sm90
