// The producer of the sm90 forward: one thread issues every TMA load of an item's Q tile and
// its key tiles' K and V into the pipelines' stages (smem.cuh, pipeline.cuh). Where a key
// block lives in the K and V tensors is a KV indexing policy's answer (ContiguousKv: a
// sequence's keys are consecutive rows; a paged cache would look its blocks up instead), so
// the load steps take "which key block" and never compute global coordinates themselves.
//
// Tiles are kColBlocks column blocks (TMA boxes) of [rows][128 bytes]; rows past Sq or Sk
// and columns past D arrive zero-filled from TMA. fp8 (e4m3): V comes as V^T from the
// pre-pass's workspace or the fused transposer's (kHeadDim rows of 64 keys per column
// block), or (Tr::kVtIn) as V itself in 64-key sub-tiles into the raw ring, which the
// producer's other warps transpose into the V^T stages (vt_transpose.cuh).
#pragma once

#include <cuda.h>

#include "cuda/common/ptx_sm90.cuh"
#include "cuda/kernels/params.hpp"
#include "cuda/kernels/sm90/bad_keys.cuh"
#include "cuda/kernels/sm90/pipeline.cuh"
#include "cuda/kernels/sm90/scheduler.cuh"
#include "cuda/kernels/sm90/smem.cuh"
#include "cuda/parts/fp8.hpp"

namespace flashcore::cuda::sm90 {

// TMA coordinates of an item's K and V: key block n's first row, its KV head and batch
// entry in the tensors' [B][S][Hkv][D] maps, and (fp8) its first key position in the V^T
// workspace ([b][Hkv][Dv][vt_sk]; varlen: one block, sequence b from fp8_vt_row0).
// kCols (16-bit): K and V whose heads are the maps' columns (FwdParams::k_hcol, v_hcol): the
// box's first column (k_col, v_col: the head's first, rounded down to 16 bytes, which TMA
// wants) and head coordinate 0 (k_head, v_head); else (and always for fp8, whose producer
// has no registers to spare for them) column 0 and hk.
template <int kBlockN, bool kCols>
struct ContiguousKv {
  int row0, head, batch, vt0, k_col, v_col, k_head, v_head;
  __device__ __forceinline__ ContiguousKv(const FwdParams& p, const SeqInfo& seq, int b, int hk)
      : row0(int(seq.k_row0)), head(hk), batch(int(seq.bb)), vt0(p.cu_k != nullptr ? int(fp8_vt_row0(seq.k_row0, b)) : 0),
        k_col(kCols ? hk * p.k_hcol & ~7 : 0), v_col(kCols ? hk * p.v_hcol & ~7 : 0),
        k_head(kCols && p.k_hcol != 0 ? 0 : hk), v_head(kCols && p.v_hcol != 0 ? 0 : hk) {}
  __device__ __forceinline__ int row(int n) const { return row0 + n * kBlockN; }
  __device__ __forceinline__ int vt_key(int n) const { return vt0 + n * kBlockN; }
};

template <class Tr>
struct Producer {
  static constexpr int kBlockM = Tr::kBlockM, kBlockN = Tr::kBlockN, kHeadDim = Tr::kHeadDim;
  const CUtensorMap *tm_q, *tm_k, *tm_v;
  SmemLayout<Tr> s;

  __device__ __forceinline__ void prefetch_maps() const {
    ptx::tma_prefetch_desc(tm_q);
    ptx::tma_prefetch_desc(tm_k);
    ptx::tma_prefetch_desc(tm_v);
  }

  // Q's tile of item w (the n-th item: qs), once the consumers released the previous
  // item's (persistent kernels: its buffer is reused while they finish that one). Packed
  // rows: heads G hk .., queries m0 / G .. (Q's map is then ordered {D, H, S, B}). Heads in
  // columns (p.q_hcol, never packed): from the head's first column rounded down to 16 bytes,
  // head coordinate 0.
  __device__ __forceinline__ void load_q(const FwdParams& p, PipelineState<1> qs, const WorkItem& w, const SeqInfo& seq,
                                         int shift) const {
    const Pipeline<1> q = s.q_pipe();
    if (Tr::kPersistent) q.producer_acquire(qs);
    q.producer_expect(qs, Tr::kTileQ);
    const int c1 = shift > 0 ? w.h << shift : int(seq.q_row0) + w.m0;
    const int hcol = Tr::kFp8 ? 0 : p.q_hcol;
    const int c2 = shift > 0 ? int(seq.q_row0) + (w.m0 >> shift) : hcol != 0 ? 0 : w.h;
    const int x0 = shift > 0 ? 0 : w.h * hcol & ~7;
#pragma unroll
    for (int c = 0; c < Tr::kColBlocks; ++c)
      ptx::tma_load_4d(s.q + c * kBlockM * 128, tm_q, q.full(0), x0 + c * Tr::kColElems, c1, c2, int(seq.bb));
  }

  // K of key block n into the K ring's buffer st.
  template <class Kv>
  __device__ __forceinline__ void load_k(PipelineState<Tr::kStages> st, int n, const Kv& kv) const {
    const Pipeline<Tr::kStages> k = s.k_pipe();
    const uint32_t off = st.stage() * Tr::kTileKV;
    k.producer_acquire(st);
    k.producer_expect(st, Tr::kTileKV);
#pragma unroll
    for (int c = 0; c < Tr::kColBlocks; ++c)
      ptx::tma_load_4d(s.k + off + c * kBlockN * 128, tm_k, k.full(st.stage()), kv.k_col + c * Tr::kColElems, kv.row(n),
                       kv.k_head, kv.batch);
  }

  // V of key block n into the V ring's buffer st (16-bit: V's rows; fp8: V^T's): the
  // stage acquired, then the loads issued. Every tile, cut by a mask or not, goes straight
  // to the consumers (16-bit: what a hidden key's NaN / Inf does to a row is found after the
  // key loop, bad_keys.cuh).
  __device__ __forceinline__ void acquire_v(PipelineState<Tr::kStages> st) const {
    const Pipeline<Tr::kStages> v = s.v_pipe();
    v.producer_acquire(st);
    v.producer_expect(st, Tr::kTileKV);
  }
  template <class Kv>
  __device__ __forceinline__ void issue_v(PipelineState<Tr::kStages> st, int n, const Kv& kv) const {
    const uint32_t off = st.stage() * Tr::kTileKV, full = s.v_pipe().full(st.stage());
    if constexpr (Tr::kFp8) {  // V^T: kHeadDim rows of 64 keys per column block
#pragma unroll
      for (int c = 0; c < kBlockN / 64; ++c)
        ptx::tma_load_4d(s.v + off + c * kHeadDim * 64, tm_v, full, kv.vt_key(n) + c * 64, 0, kv.head, kv.batch);
    } else {
#pragma unroll
      for (int c = 0; c < Tr::kColBlocks; ++c)
        ptx::tma_load_4d(s.v + off + c * kBlockN * 128, tm_v, full, kv.v_col + c * 64, kv.row(n), kv.v_head, kv.batch);
    }
  }

  // Tr::kVtIn: V of key block n in 64-key sub-tiles into the raw ring (its n-th sub-tile
  // so far: rs, advanced), each once the transposing warps released the slot's previous one
  // (they wait for the V^T stage themselves).
  template <class Kv>
  __device__ __forceinline__ void load_v_raw(int& rs, int n, const Kv& kv) const {
    const Pipeline<Tr::kRawSlots> raw = s.raw_pipe();
    for (int j = 0; j < kBlockN / 64; ++j, ++rs) {
      const PipelineState<Tr::kRawSlots> st{rs};
      raw.producer_acquire(st);
      raw.producer_expect(st, Tr::kRawSub);
#pragma unroll
      for (int c = 0; c < Tr::kColBlocks; ++c)
        ptx::tma_load_4d(s.raw + st.stage() * Tr::kRawSub + c * 64 * 128, tm_v, raw.full(st.stage()),
                         c * Tr::kColElems, kv.row(n) + 64 * j, kv.head, kv.batch);
    }
  }

  // Tr::kVtFused: before an item's first V^T load, every unit of its KV head written by the
  // transposing warps and fenced (their release, this acquire, then the fence into the
  // async proxy that TMA reads through). Returns whether one of them had a NaN.
  __device__ __forceinline__ bool wait_vt_head(const FwdParams& p, int batch, int hk) const {
    const unsigned* done = p.vt_sync + 2 + 2 * (batch * p.vt_kv_heads + hk);
    uint2 x;
    while ((x = ptx::ld_acquire_gpu_v2(done)).x < unsigned(p.vt_head_units)) __nanosleep(64);
    ptx::fence_proxy_async_global();
    return x.y != 0;
  }

  // fp8 from the pre-pass's V^T (complete: it ran before): head bh's stamp (FwdParams::vt_bad)
  // copied into item qi's BadKeys tag, counted on Q's full barrier (the consumers wait on
  // it): the item's rows take V's NaN back where it equals the call's (parts/nonfinite_v.cuh).
  // A bulk copy: no register holds it. (The fused transposer's V^T: the tag is written
  // with the item's first V load, from wait_vt_head's flag.) Before load_q: its 16 bytes are
  // expected on item qi's phase while the TMA thread's arrival is still missing from it, so
  // the phase cannot complete without them (expected after Q's loads, Q's bytes could have
  // completed the phase first, and the copy would count on the next item's phase, the tag
  // read before it landed). Persistent kernels: once the consumers released the previous
  // item's Q (load_q's wait, which then passes at once), so that the phase is item qi's and
  // tag(qi)'s last reader (item qi - 2's) is done.
  __device__ __forceinline__ void copy_stamp(const FwdParams& p, int qi, int bh) const {
    if (p.vt_bad == nullptr) return;
    if (Tr::kPersistent) s.q_pipe().producer_acquire(PipelineState<1>{qi});
    ptx::mbar_expect_tx(s.q_pipe().full(0), 16);
    ptx::bulk_load(BadKeys<Tr>{s.bad}.tag(qi), p.vt_bad + 4 * bh, 16, s.q_pipe().full(0));
  }

  // The TMA thread's work: every item of the scheduler's list, Q then its key tiles' K and
  // V (K and V stages are released separately by the consumers: K once S is computed, V
  // after P V).
  template <class Sched>
  __device__ __forceinline__ void run(const FwdParams& p, const Sched& sched) const {
    prefetch_maps();
    int it = 0, qi = 0, rs = 0;  // K/V tiles, items and (kVtIn) V sub-tiles so far
    WorkItem wi;
    for (int r = 0; sched.round_item(p, r, wi); ++r) {
      const SeqInfo seq = seq_info(p, wi.b);
      if (sched.past_end(wi, seq)) continue;
      const int hk = sched.kv_head(p, wi);
      const TileRange tiles = sched.item_tiles(p, wi, seq);
      const KeyWalk<Tr> walk(p, tiles, wi.m0, seq);
      const ContiguousKv<kBlockN, !Tr::kFp8> kv(p, seq, wi.b, hk);
      if constexpr (Tr::kFp8 && !Tr::kVtIn) {  // the pre-pass's V^T: its stamps are final
        if (!Tr::kVtFused || p.vt_sync == nullptr) copy_stamp(p, qi, kv.batch * p.kv_heads + hk);
      }
      load_q(p, PipelineState<1>{qi}, wi, seq, sched.shift);
      for (int k = tiles.lo; k < tiles.hi; ++k, ++it) {
        const int n = walk.tile(k);
        const PipelineState<Tr::kStages> st{it};
        load_k(st, n, kv);
        if constexpr (Tr::kVtIn) {
          load_v_raw(rs, n, kv);
        } else {
          if constexpr (Tr::kVtFused) {  // (the tag: before the arrival on V's full barrier, a release)
            if (p.vt_sync != nullptr && k == tiles.lo)
              ptx::sts32(BadKeys<Tr>{s.bad}.tag(qi), wait_vt_head(p, kv.batch, hk) ? p.vt_stamp : 0u);
          }
          acquire_v(st);
          issue_v(st, n, kv);
        }
      }
      ++qi;
    }
  }
};

}  // namespace flashcore::cuda::sm90
