// Host -> device parameters of the forward kernels: the resolved problem with pointers,
// strides in elements, the band mask and the folded softmax scale. Plain data, passed
// by value as the kernel argument; filled by src/cuda/launch.cpp (fwd_params) and the backend.
#pragma once

#include <cstdint>

#include "core/variants/mask.hpp"

namespace flashcore::cuda {

// n / d for 0 <= n < 2^31 by a multiply-high, an add and a shift, d >= 1 fixed on the host:
// with s = ceil(log2 d) and m = floor(2^32 (2^s - d) / d) + 1, n / d = (mulhi(n, m) + n) >> s
// (the round-up method for division by invariant integers; Granlund and Montgomery, PLDI
// 1994). The sm90 persistent kernels decode an item number into (query block, head, batch)
// at every item, on the consumers' path between two items (~730 cycles for the decode and
// the item's set-up with two divisions by run-time divisors in a clock64 trace;
// docs/results/cuda-sm90-2026-11-22.md, 2026-11-26, e49a4e2).
struct FastDiv {
  uint32_t m = 1, s = 0;  // (the default divides by 1)
  FastDiv() = default;
  explicit FastDiv(int div) {
    const uint64_t d = div < 1 ? 1 : uint64_t(div);  // (0: no item to decode)
    while ((uint64_t(1) << s) < d) ++s;
    m = uint32_t((uint64_t(1) << 32) * ((uint64_t(1) << s) - d) / d + 1);  // < 2^32: 2^(s-1) < d
  }
  FC_HD int operator()(int n) const {
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(uint32_t(n), m);
#else
    const uint32_t hi = uint32_t((uint64_t(uint32_t(n)) * m) >> 32);
#endif
    return int((hi + uint32_t(n)) >> s);
  }
};

// The sm90 persistent kernels' item numbering. Items are (query block, head, batch); with
// hb = b Hi + h (Hi: the item heads) they come in groups of `group` consecutive hb, and
// within a group query block slowest, the heaviest (last) block first, hb fastest: item w
// has block index blk (query block n_mb - 1 - blk) and head-batch hb. group 1 is one head
// after another, each from its last block down; group B Hi is every head's last block,
// then every head's next, and so on (item_order.hpp chooses).
struct ItemOrder {
  FastDiv div_items, div_group;  // by group * n_mb, by group
  int group = 1;
  ItemOrder() = default;
  ItemOrder(int g, int n_mb) : div_items(g * n_mb), div_group(g), group(g) {}
  FC_HD void decode(int w, int n_mb, int& blk, int& hb) const {
    const int gi = div_items(w), j = w - gi * group * n_mb;
    blk = div_group(j);
    hb = gi * group + (j - blk * group);
  }
};

struct FwdParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // optional, [b][h][s] with strides lse_sb, lse_sh, 1
  int64_t q_sb = 0, q_ss = 0, q_sh = 0;
  int64_t k_sb = 0, k_ss = 0, k_sh = 0;
  int64_t v_sb = 0, v_ss = 0, v_sh = 0;
  int64_t o_sb = 0, o_ss = 0, o_sh = 0;
  int64_t lse_sb = 0, lse_sh = 0;
  // sm90, 16-bit head dims off the multiples of 8 read in place: where a tensor's head stride
  // is not 16-byte aligned, its TMA map spans each row's heads as columns ([rows][(H - 1) sh
  // + D]) and head h's first column is h * hcol (hcol = sh); 0: the head is the map's own
  // coordinate. TMA boxes start at 16-byte columns, so a head's tile holds its row from
  // column r = h hcol mod 8 on, beside the neighbouring heads' columns: Q's are cleared in
  // shared memory before Q K^T (Mainloop::clear_q_tail), K's then add nothing (Q and K share
  // r: one query head per KV head, head strides equal mod 8), and O's columns come r_v
  // to the right (V's r), written from registers (Epilogue::store_shifted). The backend
  // picks a kernel whose head dim holds D + r and Dv + r_v.
  int q_hcol = 0, k_hcol = 0, v_hcol = 0;
  int batch = 0, sq = 0, sk = 0;  // sq/sk: the longest sequence when varlen
  int heads = 0, group = 1;       // query heads; query head h reads kv head h / group
  int kv_heads = 0;               // heads / group
  int d = 0, dv = 0;              // true head dims (the instance's HD may be larger: padded)
  const int32_t* cu_q = nullptr;  // varlen prefix sums (device), or null
  const int32_t* cu_k = nullptr;
  int total_q = 0, total_k = 0;   // varlen: rows of the packed Q and K/V tensors (TMA bounds)
  int sms = 0;                    // the device's SMs (the sm90 kernels' persistent grid)
  int l2_bytes = 0;               // the device's L2 (the sm90 persistent launcher's item order), or 0
  ItemOrder order;                // sm90 persistent (launcher): the items' numbering
  FastDiv div_heads;              // sm90 (launcher): by the item heads
  bool o_tma = false;             // sm90: O may be (launcher) / is (kernel) written by TMA stores (tm_o)
  int pack_shift = 0;             // sm90, 16-bit: log2 of the query heads packed per KV head (GQA), or 0
  int window_left = -1, window_right = -1;  // band mask (causal folded into right = 0)
  float scale_log2 = 0.f;                   // softmax scale * log2(e) (fp8: * q_descale * k_descale)
  // fp8 (e4m3) inputs only: V^T in the pre-pass's workspace ([b][kv head][Dv][vt_sk]
  // bytes, parts/fp8.hpp's key order), the factor of the output (v_descale) and the
  // output type (bf16, else f16).
  const void* vt = nullptr;
  int64_t vt_sk = 0;
  // fp8, kernels with FwdSm90Traits::kVtFused, fixed-length batches: V^T is written by the
  // kernel itself (no pre-pass) where this is given: zeroed device counters, [0] the queue
  // of 32-key x 128-column units (numbered head by head: (b Hkv + hk), key block, column
  // tile), [2 + 2 (b Hkv + hk)] the units of that head written so far and [3 + 2 (b Hkv +
  // hk)] 1 where one of them had a NaN (read together by one acquire load).
  unsigned* vt_sync = nullptr;
  int vt_kv_heads = 0, vt_head_units = 0;  // with vt_sync: heads / group, (vt_sk / 32) (Dv / 128)
  int vt_units = 0;                        // with vt_sync: all units, vt_head_units vt_kv_heads batch
  // fp8 with V^T from the pre-pass or the fused transposer: they write V^T with V's NaN
  // set to 0 and record where (parts/nonfinite_v.cuh): vt_bad[4 bh] (bh = block b Hkv + KV
  // head, b: V^T's batch entry, 0 for varlen; 16 bytes apart, for the kernel's bulk copy) is
  // vt_stamp where that head had a NaN (the pre-pass's; the fused transposer flags it in
  // vt_sync), and fp8_bad_words(p, bh, ct) the bits of its V^T positions (bit j % 32 of word
  // j / 32) with a NaN in 128-column tile ct. vt_stamp changes per call, so nothing needs
  // zeroing.
  unsigned* vt_bad = nullptr;
  unsigned vt_stamp = 0;
  float o_scale = 1.f;
  bool out_bf16 = false;
  // fp8 under Exp2Mode::fast without lse: the launcher takes the kernel's chord form (half
  // of the speculative softmax's exponentials by their chord: OnlineSoftmax::speculate).
  bool exp_chord = false;
  // fp8 per-head factors ([batch][heads / group] floats, device), or null: an item of
  // (b, kv head hk) multiplies scale_log2 by the q and k entries, o_scale by the v entry.
  const float* q_descale_heads = nullptr;
  const float* k_descale_heads = nullptr;
  const float* v_descale_heads = nullptr;
  // sm90, 16-bit, not persistent: KV splits (flash-decoding). kv_splits > 1 CTAs share an
  // item's key tiles (split j takes the j-th of kv_splits near-equal runs) and write their
  // unnormalized O rows and (m, mlo, l, 0) (the row's max m + mlo in the log2 domain, in two
  // parts as OnlineSoftmax::finish gives it, and its sum) to part_o / part_ml, row index
  // r = ((j B + b) Sq + query) H + query head (varlen: (j total_q + the query's row) H +
  // query head; part_o: r Dv floats on); kv_combine.cu merges them into O and lse.
  int kv_splits = 1;
  float* part_o = nullptr;
  float4* part_ml = nullptr;
  // Score variants (core/variants/score.hpp; the sm90 "_sv" kernels, the sm80 family's
  // variant kernels, the exact fp32 kernel, and the sinks in kv_combine.cu). `variants`: any
  // of them set, the launcher takes the variant kernel (the plain one never reads the fields
  // below). In the log2
  // domain the kernels work in, with z = the transformed natural-log score:
  //   z log2 e = softcap_out tanh(scale acc / c) - m_bh log2 e |i + Sk - Sq - j|
  // softcap_out = c log2 e (0: no softcap; then z log2 e = acc scale_log2 - ...),
  // softcap_in = 2 log2 e scale / c (acc softcap_in is the exponent of the device tanh:
  // parts/score_mod.cuh). ALiBi slope m_bh of (sequence or batch entry b, head h):
  // alibi[b alibi_sb + h], or null; sinks[h] (natural log), or null. tanh_in = scale / c
  // under Exp2Mode::fast (the tensor-core variant kernels then take tanh from tanh.approx.f32,
  // one MUFU operation instead of two), else 0.
  bool variants = false;
  float softcap_in = 0.f, softcap_out = 0.f, tanh_in = 0.f;
  const float* alibi = nullptr;
  int64_t alibi_sb = 0;
  const float* sinks = nullptr;
  // attention_with_kvcache (the kvc kernels, kernels/kvc_sm80.cuh): sequence b has
  // min(seqlens_k[b] + s_new, cache_rows) keys (lengths read on the device). With
  // block_table the cache is paged: key s is row s % page_size of page
  // block_table[b bt_sb + s / page_size], k / v point at page 0 and k_sb / v_sb are the
  // page strides; a page id outside [0, num_pages) reads as zero rows (never out of bounds).
  const int32_t* seqlens_k = nullptr;
  int s_new = 0, cache_rows = 0;
  const int32_t* block_table = nullptr;
  int64_t bt_sb = 0;
  int page_size = 0, num_pages = 0;

  // O's query rows: B Sq, or the packed tensor's total_q (varlen); the splits' stride in
  // part_o / part_ml is o_rows() H rows.
  FC_HD int64_t o_rows() const { return cu_q != nullptr ? int64_t(total_q) : int64_t(batch) * sq; }
  // vt_bad's layout (above): the stamps of the V^T blocks' KV heads (4 words each), then per
  // (bh, ct) the words of vt_sk positions. Its size in words, for the workspace.
  FC_HD int64_t fp8_bad_heads() const { return int64_t(cu_q != nullptr ? 1 : batch) * kv_heads; }
  FC_HD int64_t fp8_bad_size() const {
    return fp8_bad_heads() * (4 + int64_t((dv + 127) / 128) * (vt_sk / 32));
  }
  FC_HD unsigned* fp8_bad_words(int64_t bh, int ct) const {
    return vt_bad + 4 * fp8_bad_heads() + (bh * ((dv + 127) / 128) + ct) * (vt_sk / 32);
  }
};

// The band mask of a sequence of sq queries and sk keys (causal folded into right = 0):
// the kernels' per sequence (parts/seq_mask.cuh), the persistent launcher's for its
// schedule (item_order.hpp).
FC_HD core::BandMask band_mask(const FwdParams& p, int sq, int sk) {
  core::BandMask m;
  m.left = p.window_left;
  m.right = p.window_right;
  m.offset = int64_t(sk) - sq;
  return m;
}

// Which key tiles of width bn a block of query rows [m0, m_last] must visit: [lo, hi);
// and whether tile n needs the element mask (it is cut by the band or by Sk). Used by the
// kernels and by the persistent launcher's item costs (item_order.hpp).
struct TileRange {
  int lo, hi;
  int full_lo, full_hi;  // tiles in [full_lo, full_hi) need no mask
};
FC_HD TileRange tile_range(const core::BandMask& m64, int m0, int m_last, int sk, int bn) {
  // In int (core/variants/mask.hpp: the kernels' limits keep the sums in range); in 64 bits
  // it took the sm90 producer thread (24 registers) past its registers.
  const core::BasicBandMask<int> m{int(m64.left), int(m64.right), int(m64.offset)};
  TileRange r;
  const int kb = m.key_begin(m0, sk), ke = m.key_end(m_last, sk);
  r.lo = kb / bn;
  r.hi = ke > kb ? (ke + bn - 1) / bn : r.lo;
  // Every row of the block sees [key_begin(m_last), key_end(m0)).
  const int fb = m.key_begin(m_last, sk), fe = m.key_end(m0, sk);
  r.full_lo = (fb + bn - 1) / bn;
  r.full_hi = fe / bn;
  return r;
}

// An item's key tiles [lo, hi) (TileRange: a KV split's run) that the band or Sk cuts, the
// ones outside [full_lo, full_hi), numbered in order (ordinal), -1 for the others: the tiles
// where a NaN or Inf of V could reach rows that do not see its key (parts/nonfinite_v.cuh).
// At most max_cut_tiles(block_m, block_n) per item (cut_tiles.hpp).
struct CutTiles {
  int lo, hi, fl, fh;  // cut: [lo, fl) and [fh, hi)
  FC_HD explicit CutTiles(const TileRange& r) : lo(r.lo), hi(r.hi) {
    fl = r.full_lo < lo ? lo : r.full_lo > hi ? hi : r.full_lo;
    fh = r.full_hi < fl ? fl : r.full_hi > hi ? hi : r.full_hi;
  }
  FC_HD int ordinal(int n) const { return n < fl ? n - lo : n >= fh ? fl - lo + n - fh : -1; }
};

// Per-sequence geometry shared by every kernel: sequence b is batch entry `bb` of the
// tensors, starting at row q_row0 (k_row0) along s; varlen packs all sequences in
// batch entry 0 and reads the rows and lengths from the prefix sums.
struct SeqInfo {
  int64_t bb, q_row0, k_row0;
  int sq, sk;
};

}  // namespace flashcore::cuda
