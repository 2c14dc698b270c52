// Attention on the CPU: a plan (kernels, block shapes), K and V packed per chunk of
// (batch, kv head) groups, then every query block through softmax_block.
//
// Two block shapes, one pipeline. Prefill: blocks of mq query rows of one head, K and V
// packed once per (batch, kv head) for the GEMM micro-kernels. Decode (the query rows of
// a whole GQA group, group * Sq, fit in kDecodeRows): one block holds every query row of
// one or more whole groups (kv heads), computed by the row ops straight from K and V, so
// each call reads K and V once and packs nothing; split over keys when there are fewer
// blocks than threads. Several kv heads per block: in BSHD tensors the rows of
// consecutive kv heads of one key are adjacent, so a block's key tile reads whole
// stretches of each page instead of one head's 2^k bytes per page (one head alone ran
// well below the memory bandwidth that contiguous rows reach).
// Measured, for this file's choices: docs/results/cpu-pipelines-2026-11-29.md.
//
// K and V are read only through a KV source (kv_source.hpp): the pipeline is one template
// over KvSource (tensors, a contiguous cache) and PagedKvSource (a paged cache).
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "core/exp2.hpp"
#include "cpu/dispatch/dispatch.hpp"
#include "cpu/pipelines/common.hpp"
#include "cpu/pipelines/geometry.hpp"
#include "cpu/pipelines/kv_source.hpp"
#include "cpu/pipelines/pack.hpp"
#include "cpu/pipelines/pipelines.hpp"
#include "cpu/pipelines/score_mod.hpp"
#include "cpu/pipelines/stages.hpp"
#include "cpu/pipelines/strategies.hpp"

namespace flashcore::cpu {
namespace {

// Attention takes the decode path (row ops, K/V read in place) when the query rows of one
// GQA group, group * Sq, are at most this many.
constexpr int64_t kDecodeRows = 32;
// Packed K and V of at most this many bytes are built per chunk of groups.
constexpr size_t kPackBudgetBytes = size_t(64) << 20;

// Whether every element of V (fp16 storage) has |v| <= 2^7: NaN and inf do not. P V summed
// in fp16 (a kernel with acc f16) adds at most 128 products P v per lane and two lanes per
// chunk of <= 256 keys, with P <= 1: |sum| <= 256 * 128 = 32768 < 65504.
template <class Src>
bool v_fits_f16_sums(const core::AttentionProblem& p, const Src& v, int nthreads) {
  constexpr int16_t kBound = 0x5800;  // fp16 bits of 128
  const int64_t sk = std::max<int64_t>(p.sk, 1);  // varlen: the longest sequence
  int fits = 1;
#pragma omp parallel for num_threads(nthreads) reduction(min : fits)
  for (int64_t r = 0; r < p.batch * sk; ++r) {
    const int64_t b = r / sk, s = r % sk;
    if (s >= v.seq_len(b)) continue;
    for (int64_t h = 0; h < p.kv_heads; ++h) {
      const uint16_t* row = static_cast<const uint16_t*>(v.row(b, s, h));
      int16_t worst = 0;  // |v| bits as a signed max (SSE2's pmaxsw)
      for (int64_t e = 0; e < p.dv; ++e) worst = std::max(worst, int16_t(row[e] & 0x7FFF));
      if (worst > kBound) fits = 0;
    }
  }
  return fits == 1;
}

// A NaN or Inf element of V: key (of its sequence), column, and kv head within a decode
// block (0 on the GEMM path, whose lists are per kv head).
struct NonFiniteV {
  int64_t key, col, kvi;
};

// Whether the element of V stored as dtype t at `e` is NaN or Inf (all exponent bits set;
// e4m3, which has no Inf: S.1111.111, its NaN).
inline bool nonfinite_at(const void* row, int64_t e, DType t) {
  const uint16_t* h = static_cast<const uint16_t*>(row);
  switch (t) {
    case DType::f16: return (h[e] & 0x7C00) == 0x7C00;
    case DType::bf16: return (h[e] & 0x7F80) == 0x7F80;
    case DType::e4m3: return (static_cast<const uint8_t*>(row)[e] & 0x7F) == 0x7F;
    default: return !std::isfinite(static_cast<const float*>(row)[e]);
  }
}

// Masked keys must not reach the rows that do not see them, but P V multiplies every key
// of a tile: a NaN / Inf in V at a key hidden from one row (by causal or a window) made
// that row NaN through 0 * NaN (stale KV-cache slots outside a sliding window, say). Where
// a mask applies, V's non-finite elements are listed and read as 0 by the GEMM (zeroed in
// the packed panels, or in the decode path's converted rows), and each is added back, as
// P_ij v_j, to exactly the rows that see its key (Attention::add_nonfinite). The scan
// reads V once more per call (in cache, after its packing); lists are empty in practice.
// Whether any of the n elements of a row stored as dtype t is NaN or Inf: one branch-free
// pass over the bits per dtype (vectorized; the scan runs on every key of a banded call).
inline bool any_nonfinite(const void* row, int64_t n, DType t) {
  uint32_t hit = 0;
  if (t == DType::f32) {
    const float* f = static_cast<const float*>(row);
    for (int64_t e = 0; e < n; ++e) hit |= uint32_t((std::bit_cast<uint32_t>(f[e]) & 0x7F800000u) == 0x7F800000u);
  } else if (t == DType::e4m3) {
    const uint8_t* b = static_cast<const uint8_t*>(row);
    for (int64_t e = 0; e < n; ++e) hit |= uint32_t((b[e] & 0x7F) == 0x7F);
  } else {
    const uint16_t* h = static_cast<const uint16_t*>(row);
    const uint16_t m = t == DType::f16 ? 0x7C00 : 0x7F80;
    for (int64_t e = 0; e < n; ++e) hit |= uint32_t((h[e] & m) == m);
  }
  return hit != 0;
}

template <class R>
void list_nonfinite(const R& v, int64_t k0, int64_t k1, int64_t dv, int64_t kvi, std::vector<NonFiniteV>& out) {
  for (int64_t k = k0; k < k1; ++k) {
    const void* row = v.row(k);
    if (!any_nonfinite(row, dv, v.dtype)) continue;
    for (int64_t e = 0; e < dv; ++e)
      if (nonfinite_at(row, e, v.dtype)) out.push_back({k, e, kvi});
  }
}

// The first row and the length of sequence b along s: varlen (cu) or the fixed length.
std::pair<int64_t, int64_t> seq(const int32_t* cu, int64_t b, int64_t fixed) {
  return cu ? std::make_pair(int64_t(cu[b]), int64_t(cu[b + 1] - cu[b])) : std::make_pair(int64_t(0), fixed);
}

// What one attention call runs: kernels, block shapes and the grouping of the work.
struct Plan {
  CpuConfig cfg;
  bool varlen = false;
  bool rows_mode = false;  // the decode path (row ops)
  int64_t sq_max = 1;
  int64_t mqh = 0;         // decode: query rows per kv head (group * Sq)
  int64_t kvb = 1;         // kv heads per block (decode), else 1
  Geometry g, g2;          // stage 1 and the softmax; P and stage 2 (a pair's second kernel)
  Strategy strategy = Strategy::automatic;
  int nthreads = 1;
  // Softcap / ALiBi (score_mod.hpp): the scores are transformed in the natural-log domain
  // after each tile's GEMM, so c = log2(e) and the softmax's scale is 1; else scale * log2(e).
  core::ScoreMod mod;
  float c = 0;
  float softmax_scale = 1;
  int64_t kp = 0, dvp = 0; // padded head dims of Q/K (3 d with a split) and of V
  bool split = false;   // Q and K as bf16 parts (fp16 storage, bf16 Q K^T kernel; pack.hpp)
  bool vsplit = false;  // V as two bf16 panel sets, hi and lo (fp16 V, bf16 P V kernel)
  // A block: `hpb` heads of kvb groups x `seg` query rows each.
  int64_t hpb = 1, seg = 1, qblocks = 1, blocks_per_group = 1;
  // Groups (batch, kv head; decode: batch, kv block) share one packed K and V; they are
  // processed in chunks of `chunk` groups that fit the packing budget.
  int64_t nkvb = 1, ngroups = 0, skp_max = 0;
  bool k_inplace = false;  // stage 1 reads K's rows in place (not packed)
  int64_t group_bytes = 0, chunk = 1;
};

template <class Src>
Plan make_plan(const core::AttentionProblem& p, const Src& k, const Src& v) {
  Plan a;
  a.cfg = select_kernels(p.dtype, p.impl, true);
  a.varlen = p.cu_q != nullptr;
  a.sq_max = std::max<int64_t>(p.sq, 1);
  a.rows_mode = p.group() * a.sq_max <= kDecodeRows && !gemm_forced(p.impl);
  a.nthreads = resolve_threads(p.threads);
  // `auto`'s fp16 P V kernel (a pair, auto_table.inc) only where its fp16 sums cannot
  // overflow; otherwise the first kernel runs both stages. (A forced pair is the caller's
  // choice, as a forced fp16 kernel is.)
  if (a.cfg.gemm2 != nullptr && a.cfg.gemm2->acc != DType::f32 && !gemm_forced(p.impl) && !a.rows_mode &&
      !(p.dtype == DType::f16 && p.kv_dtype == DType::f16 && v_fits_f16_sums(p, v, a.nthreads))) {
    a.cfg.gemm2 = nullptr;
    a.cfg.vec2 = nullptr;
  }
  // kv heads per block: 1, or in decode the most that divide Hkv within kDecodeBlockRows.
  a.mqh = p.group() * a.sq_max;
  if (a.rows_mode)
    for (int64_t n = 1; n <= p.kv_heads; ++n)
      if (p.kv_heads % n == 0 && n * a.mqh <= std::max(kDecodeBlockRows, a.mqh)) a.kvb = n;
  a.g = a.rows_mode ? make_rows_geometry(a.cfg, a.kvb * a.mqh)
                    : make_geometry(a.cfg, p.sq, true,
                                    p.sk * (p.d + p.dv) * int64_t(dtype_size(a.cfg.gemm->ab)),
                                    kKeyTile * 8 + (p.d + p.dv) * 4);
  // A decode key tile covers every kv head of the block: as many rows in all as a
  // one-head tile, so that the heads' reads of one page stay close in time.
  if (a.rows_mode) a.g.kc = std::max<int64_t>(16, round_up(kKeyTile / a.kvb, 16));
  // P and stage 2 (P V): the pair's second kernel, else g itself.
  a.g2 = a.rows_mode ? a.g : stage2_geometry(a.g, a.cfg);
  a.strategy = resolve(p.strategy, p.sq, p.sk, p.d, p.dtype);
  a.mod = p.score_mod();
  a.c = a.mod.active() ? core::kLog2e : p.scale * core::kLog2e;
  a.softmax_scale = a.mod.active() ? 1.0f : p.scale;
  a.split = !a.rows_mode && a.g.gk->ab == DType::bf16 && p.dtype == DType::f16;
  a.kp = a.rows_mode ? p.d : round_up(a.split ? 3 * p.d : p.d, a.g.gk->k_align);
  a.dvp = a.rows_mode ? p.dv : round_up(p.dv, a.g2.nr);
  a.hpb = a.rows_mode ? a.kvb * p.group() : 1;
  a.seg = a.rows_mode ? a.sq_max : a.g.mq;
  a.qblocks = (a.sq_max + a.seg - 1) / a.seg;
  a.blocks_per_group = a.rows_mode ? 1 : p.group() * a.qblocks;
  a.nkvb = p.kv_heads / a.kvb;
  a.ngroups = p.batch * a.nkvb;
  a.skp_max = round_up(std::max<int64_t>(p.sk, 1), a.g.key_align);
  // Stage 1 reads K in place where the kernel's A layout is plain rows of the storage
  // dtype (AMX: bf16 rows, any row stride) and no key block or k step needs padding: its
  // packing was a copy. Only while one head's K rows span at most half of L2: rows a
  // power-of-two stride apart share cache sets, and over a longer span they no longer fit.
  // (Not for a KV cache: its sequences' lengths differ. Paged K never: its rows are no run.)
  if constexpr (Src::kStrided)
    a.k_inplace = !a.rows_mode && !a.varlen && p.seqlens_k == nullptr && a.g.pa == Layout::rows &&
                  a.g.gk->ab == p.kv_dtype && a.kp == p.d && a.skp_max == p.sk && k.span_bytes(p.sk) <= l2_bytes() / 2;
  a.vsplit = !a.rows_mode && a.g2.gk->ab == DType::bf16 && p.kv_dtype == DType::f16 && a.g2.pb == Layout::kpairs;
  a.group_bytes = a.rows_mode ? 0 : a.skp_max * (a.kp * a.g.es + (a.vsplit ? 2 : 1) * a.dvp * a.g2.es);
  a.chunk = a.rows_mode ? a.ngroups : std::max<int64_t>(1, int64_t(kPackBudgetBytes) / a.group_bytes);
  return a;
}

// Where work item `it` of a chunk lives: its group, first head and first query row, and
// its output.
struct Item {
  int64_t gi, b, hk, h0, s0, bb, sq, sk;
  BlockOut out;
};

// The keys a block's rows see: [key_lo, key_hi) over all its valid rows, and
// [all_lo, all_hi) seen by every row.
struct KeyRange {
  int64_t key_lo, key_hi, all_lo, all_hi;
};

// Blanks (-inf) the entries of score tile t (kc keys from j0, rows of mq) that their row
// does not see. Per key: skip the keys every row sees ([all_lo, all_hi)), blank the ones no
// row sees (past Sk: the tile's padding to whole kernel tiles; the last tile of every
// block has some), and test rows only on the rest (the causal or window band). Within a
// segment (one head's rows, `rows` of them valid) the rows' first and end keys lo / hi
// never decrease from row to row (mask.hpp), so the valid rows that cannot see key j are a
// prefix (end <= j) and a suffix (begin > j): two binary searches and two fills per key
// instead of a test per element.
void mask_tile(float* t, int64_t j0, int64_t kc, int64_t mq, int64_t seg, int64_t rows, int64_t sk,
               const KeyRange& kr, const int64_t* lo, const int64_t* hi) {
  for (int64_t k = 0; k < kc; ++k) {
    const int64_t j = j0 + k;
    if (j >= kr.all_lo && j < kr.all_hi) continue;
    float* row = t + k * mq;
    if (j >= sk) {
      std::fill(row, row + mq, kNegInf);
      continue;
    }
    for (int64_t r0 = 0; r0 < mq; r0 += seg) {
      const int64_t r1 = std::min(mq, r0 + rows);
      std::fill(row + r0, row + (std::upper_bound(hi + r0, hi + r1, j) - hi), kNegInf);
      std::fill(row + (std::upper_bound(lo + r0, lo + r1, j) - lo), row + r1, kNegInf);
    }
  }
}

// One chunk of groups: its first group, its work items and their split over keys.
struct Chunk {
  int64_t g0 = 0, items = 0, nsplit = 1;
  std::vector<float> split_o, split_ml;  // nsplit > 1: each part's O rows and (max, l)
};

// One query block being computed: its item, its geometry (g and g2 with the rows it
// computes, live_rows), its K/V operands and its packed queries. R: the KV source's rows.
template <class R>
struct Block {
  Item x;
  Geometry gb, gb2;
  int64_t skp;          // its keys padded to whole key blocks
  R k;                  // K rows of its kv head (read in place with k_inplace)
  const char* kpack;    // packed K blocks and V panels of its group (null in decode)
  const char* vpack;
  char* qpack;          // packed Q panels; decode: per kv head fp32 [d][mqh] then [mqh][d]
  const int64_t* lo;    // per row: the first key it sees and the end of its keys
  const int64_t* hi;
  KeyRange kr;
  const std::vector<NonFiniteV>* bad = nullptr;  // V's NaN / Inf it must add back (or null)
  TileMod mod;          // softcap / ALiBi of its rows (when the plan's mod is active)
};

// The pipeline over one KV source (kv_source.hpp: KvSource or PagedKvSource).
template <class Src>
class Attention {
 public:
  using Block = cpu::Block<typename Src::RowSource>;

  Attention(const core::AttentionProblem& p, PhaseTimes* times)
      : p_(p), k_(p, p.k), v_(p, p.v),
        a_(make_plan(p, k_, v_)), es_in_(int64_t(dtype_size(p.dtype))), timed_(times != nullptr),
        phases_(static_cast<size_t>(a_.nthreads)), banded_(p.banded()) {}

  void run(PhaseTimes* times) {
    packed_ = a_.rows_mode ? nullptr
                           : pack_slot(0, static_cast<size_t>(std::min(a_.chunk, a_.ngroups) * a_.group_bytes));
    for (int64_t g0 = 0; g0 < a_.ngroups; g0 += a_.chunk) {
      const int64_t g1 = std::min(a_.ngroups, g0 + a_.chunk);
      pack_kv(g0, g1);
      run_blocks(g0, g1);
    }
    report(times, phases_, a_.g.key, a_.strategy);
    if (times != nullptr && a_.g2.gk != a_.g.gk) times->kernel = std::string(a_.g.key) + "+" + a_.g2.key;
  }

 private:
  Phases& phases() { return phases_[size_t(omp_get_thread_num())]; }
  void pack_kv(int64_t g0, int64_t g1);
  void run_blocks(int64_t g0, int64_t g1);
  Item locate(int64_t g0, int64_t it) const;
  void run_item(Chunk& ch, int64_t it2);
  void pack_queries(const Item& x, char* qpack, float* rowbuf) const;
  KeyRange key_range(const Item& x, int64_t mq, const core::BandMask& mask, int64_t* lo, int64_t* hi) const;
  bool scores(const Block& bl, int64_t j0, int64_t kc, float* t, float* mx, bool negate, Phases& ph,
              Lap& lap) const;
  void pv(const Block& bl, int64_t j0, int64_t kc, const char* P, int64_t ldp, float* O) const;
  void add_nonfinite(const Block& bl, int64_t j0, int64_t kc, const char* P, int64_t ldp, float* O) const;
  const std::vector<NonFiniteV>* decode_nonfinite(const Block& bl) const;
  TileMod tile_mod(const Item& x, int64_t mq, Arena& arena) const;
  // decode: kv head kvi's queries, y = [d][mqh] then q = [mqh][d] (RowOps::dot)
  float* qy(char* qpack, int64_t kvi) const {
    return reinterpret_cast<float*>(qpack) + kvi * 2 * a_.mqh * p_.d;
  }

  const core::AttentionProblem& p_;
  const Src k_, v_;
  const Plan a_;
  const int64_t es_in_;  // storage bytes of q, k, v and o
  const bool timed_;
  std::vector<Phases> phases_;
  char* packed_ = nullptr;  // the packed K and V of a chunk's groups (null in decode)
  const bool banded_;       // a mask hides keys from some rows: V's NaN / Inf are guarded
  // GEMM path, per (group of the chunk, packing part): V's NaN / Inf, zeroed in the panels
  std::vector<std::vector<NonFiniteV>> vbad_;
  int64_t parts_ = 1;
};

// Packs K (as stage-1 A blocks of MR keys) and V (as stage-2 panels) of groups [g0, g1),
// each split into parts so that one large group still uses every thread.
template <class Src>
void Attention<Src>::pack_kv(int64_t g0, int64_t g1) {
  const Plan& a = a_;
  const Geometry& g = a.g;
  const int64_t parts = a.rows_mode ? 0 : std::max<int64_t>(1, (a.nthreads + (g1 - g0) - 1) / (g1 - g0));
  parts_ = std::max<int64_t>(parts, 1);
  vbad_.assign(banded_ ? static_cast<size_t>((g1 - g0) * parts_) : 0, {});
  // (contiguous runs of groups per thread: see run_blocks)
#pragma omp parallel for schedule(static) num_threads(a.nthreads) collapse(2)
  for (int64_t gi = g0; gi < g1; ++gi) {
    for (int64_t part = 0; part < parts; ++part) {
      Lap lap(timed_);
      const int64_t b = gi / p_.kv_heads, hk = gi % p_.kv_heads;
      const int64_t sk = k_.seq_len(b);
      const int64_t skp = round_up(std::max<int64_t>(sk, 1), g.key_align);
      char* kpack = packed_ + (gi - g0) * a.group_bytes;
      char* vpack = kpack + a.skp_max * a.kp * g.es;
      std::vector<float> rowbuf(static_cast<size_t>(std::max(a.kp, a.dvp) + 64));
      const int64_t nblk = skp / g.mr;
      const int64_t kb0 = nblk * part / parts, kb1 = nblk * (part + 1) / parts;
      if (!a.k_inplace)
        pack_transposed(k_.head(b, hk), sk, p_.d, a.kp, g.mr, kb0, kb1, kpack, g.gk->ab, g.pa, rowbuf.data(),
                        a.split ? Split::keys : Split::none);
      // V's panels; where a mask applies, in steps of ~16 KiB of V (whole key blocks), each
      // step's keys listed for NaN / Inf while the packing has just brought them into cache.
      // (Not in steps for the rows layout: pack_panels transposes its panels whole, in one
      // call over every key.)
      const int64_t v0 = kb0 * g.mr, v1 = kb1 * g.mr;
      const bool stepped = banded_ && a.g2.pb != Layout::rows;
      const int64_t step = stepped ? g.mr * std::max<int64_t>(1, (16384 / std::max<int64_t>(1, p_.dv * es_in_)) / g.mr)
                                   : std::max<int64_t>(v1 - v0, 1);
      std::vector<NonFiniteV>* bad = banded_ ? &vbad_[size_t((gi - g0) * parts + part)] : nullptr;
      for (int64_t k0 = v0; k0 < v1; k0 += step) {
        const int64_t k1 = std::min(k0 + step, v1);
        pack_panels(v_.head(b, hk), sk, p_.dv, skp, a.g2.nr, k0, k1, vpack, a.g2.gk->ab, a.g2.pb, rowbuf.data(),
                    a.vsplit ? vpack + a.skp_max * a.dvp * a.g2.es : nullptr);
        if (bad != nullptr) list_nonfinite(v_.head(b, hk), k0, std::min(k1, sk), p_.dv, 0, *bad);
      }
      if (bad != nullptr) {  // the listed elements zeroed in the panels (their low parts are 0)
        const int64_t es2 = a.g2.es;
        for (const NonFiniteV& e : *bad)
          std::memset(vpack + ((e.col / a.g2.nr) * skp * a.g2.nr + pack_index(a.g2.pb, e.key, e.col % a.g2.nr, a.g2.nr)) * es2,
                      0, size_t(es2));
      }
      lap.to(phases().pack);
    }
  }
}

template <class Src>
Item Attention<Src>::locate(int64_t g0, int64_t it) const {
  const Plan& a = a_;
  Item x;
  x.gi = g0 + it / a.blocks_per_group;
  const int64_t r = it % a.blocks_per_group;
  x.b = x.gi / a.nkvb;
  x.hk = x.gi % a.nkvb * a.kvb;
  x.h0 = x.hk * p_.group() + (r / a.qblocks) * a.hpb;
  x.s0 = (r % a.qblocks) * a.seg;
  x.bb = a.varlen ? 0 : x.b;
  const auto [q_off, sq] = seq(p_.cu_q, x.b, p_.sq);
  x.sq = sq;
  x.sk = k_.seq_len(x.b);
  const int64_t qs = q_off + x.s0;
  x.out = BlockOut{static_cast<char*>(p_.o) + (x.bb * p_.o_sb + qs * p_.o_ss + x.h0 * p_.o_sh) * es_in_,
                   p_.o_ss, p_.dtype, std::min(a.seg, sq - x.s0), p_.dv,
                   p_.lse ? p_.lse + x.bb * p_.lse_sb + x.h0 * p_.lse_sh + qs : nullptr,
                   a.seg, p_.o_sh, p_.lse_sh};
  x.out.sink = p_.sinks != nullptr ? p_.sinks + x.h0 : nullptr;
  return x;
}

// Packs a block's queries: stage-1 B panels (Q^T, NR queries per panel), or for the row
// ops per kv head fp32 [d][mqh] followed by [mqh][d].
template <class Src>
void Attention<Src>::pack_queries(const Item& x, char* qpack, float* rowbuf) const {
  const Plan& a = a_;
  const int64_t q_off = a.varlen ? p_.cu_q[x.b] : 0;
  if (!a.rows_mode) {
    const Rows qrows{at(p_.q.data, x.bb * p_.q.sb + (q_off + x.s0) * p_.q.ss + x.h0 * p_.q.sh, es_in_),
                     p_.q.ss, p_.dtype};
    pack_transposed(qrows, x.out.rows, p_.d, a.kp, a.g.nr, 0, a.g.mq / a.g.nr, qpack, a.g.gk->ab, a.g.pb,
                    rowbuf, a.split ? Split::queries : Split::none);
    return;
  }
  for (int64_t i = 0; i < a.g.mq; ++i) {
    if (x.out.valid(i)) {
      core::convert_row(at(p_.q.data, x.bb * p_.q.sb + (i / a.seg) * p_.q.sh +
                                          (x.s0 + i % a.seg + q_off) * p_.q.ss + x.h0 * p_.q.sh, es_in_),
                        p_.dtype, p_.d, rowbuf);
    } else {
      std::fill(rowbuf, rowbuf + p_.d, 0.0f);
    }
    float* y = qy(qpack, i / a.mqh);
    const int64_t il = i % a.mqh;
    for (int64_t e = 0; e < p_.d; ++e) y[e * a.mqh + il] = rowbuf[e];
    std::copy(rowbuf, rowbuf + p_.d, y + a.mqh * p_.d + il * p_.d);
  }
}

// Each row's keys [lo, hi) under the mask, and the block's KeyRange over its mq rows.
template <class Src>
KeyRange Attention<Src>::key_range(const Item& x, int64_t mq, const core::BandMask& mask, int64_t* lo,
                              int64_t* hi) const {
  KeyRange kr{x.sk, 0, 0, x.sk};
  for (int64_t i = 0; i < mq; ++i) {
    const bool v = x.out.valid(i);
    lo[i] = v ? mask.key_begin(x.s0 + i % a_.seg, x.sk) : 0;
    hi[i] = v ? mask.key_end(x.s0 + i % a_.seg, x.sk) : x.sk;
    if (v && hi[i] > lo[i]) {
      kr.key_lo = std::min(kr.key_lo, lo[i]);
      kr.key_hi = std::max(kr.key_hi, hi[i]);
    }
    kr.all_lo = std::max(kr.all_lo, lo[i]);
    kr.all_hi = std::min(kr.all_hi, hi[i]);
  }
  return kr;
}

// softmax_block's Scores: key tile [j0, j0+kc) of the block as T[kc][mq] (negated when
// `negate`), masked entries -inf; true when the tile's column max was folded into mx in
// stage 1.
template <class Src>
bool Attention<Src>::scores(const Block& bl, int64_t j0, int64_t kc, float* t, float* mx, bool negate, Phases& ph,
                       Lap& lap) const {
  const Plan& a = a_;
  const bool visible = j0 >= bl.kr.all_lo && j0 + kc <= bl.kr.all_hi;  // no key of the tile masked
  if (a.rows_mode) {
    thread_local std::vector<float> kconv;
    for (int64_t kvi = 0; kvi < a.kvb; ++kvi) {
      const auto kr = k_.head(bl.x.b, bl.x.hk + kvi);
      const float* q = qy(bl.qpack, kvi) + a.mqh * p_.d;
      const RowOps::Dot16 dot16 = a.cfg.rows->dot16(kr.dtype);
      if (dot16 != nullptr || kr.dtype == DType::f32) {
        // fp32 and 16-bit rows read in place (16-bit ones widened in registers), a strided
        // run (a page's rows) per call
        for (int64_t k = 0, n = 0; k < kc; k += n) {
          n = kr.run_length(j0 + k, kc - k);
          float* tk = t + k * a.g.mq + kvi * a.mqh;
          if (dot16 != nullptr)
            dot16(n, p_.d, static_cast<const uint16_t*>(kr.row(j0 + k)), kr.stride, q, qy(bl.qpack, kvi), a.mqh,
                  tk, a.g.mq);
          else
            a.cfg.rows->dot(n, p_.d, static_cast<const float*>(kr.row(j0 + k)), kr.stride, q, qy(bl.qpack, kvi),
                            a.mqh, tk, a.g.mq);
        }
        continue;
      }
      const float* xr = f32_rows(kr, j0, kc, p_.d, kconv);
      a.cfg.rows->dot(kc, p_.d, xr, p_.d, q, qy(bl.qpack, kvi), a.mqh, t + kvi * a.mqh, a.g.mq);
    }
  } else {
    // K's blocks: rows of the caller's tensor (k_inplace) or the packed blocks
    const bool inplace = Src::kStrided && a.k_inplace;
    const char* kx = inplace ? static_cast<const char*>(bl.k.row(j0)) : bl.kpack + j0 * a.kp * a.g.es;
    const int64_t kxs = inplace ? bl.k.stride : block_ld(a.g.pa, a.kp, a.g.mr);
    // (the column max of raw scores is the max only without a score transform)
    stage1(bl.gb, a.kp, kc, kx, inplace ? a.g.mr * bl.k.stride : a.kp * a.g.mr, kxs, bl.qpack, t,
           bl.gb.mq, visible && !a.mod.active() ? mx : nullptr);
  }
  lap.to(ph.gemm);
  if (a.mod.active()) mod_scores(t, kc, bl.gb.mq, j0, bl.mod);  // (c > 0 there: never negated)
  if (negate) negate_scores(t, kc * bl.gb.mq);
  if (visible) return !a.rows_mode && mx != nullptr && !a.mod.active();
  mask_tile(t, j0, kc, bl.gb.mq, a.seg, bl.x.out.rows, bl.x.sk, bl.kr, bl.lo, bl.hi);
  return false;
}

// softmax_block's PV: O += P^T x V rows [j0, j0+kc) of the block.
template <class Src>
void Attention<Src>::pv(const Block& bl, int64_t j0, int64_t kc, const char* P, int64_t ldp, float* O) const {
  const Plan& a = a_;
  bool fix = false;  // a listed NaN / Inf of V in this tile
  if (bl.bad != nullptr)
    for (const NonFiniteV& e : *bl.bad) fix |= e.key >= j0 && e.key < j0 + kc;
  if (!a.rows_mode) {
    stage2(bl.gb2, kc, P, ldp, bl.vpack, bl.skp, j0, a.dvp, O);
    if (a.vsplit) stage2(bl.gb2, kc, P, ldp, bl.vpack + a.skp_max * a.dvp * a.g2.es, bl.skp, j0, a.dvp, O);
  } else {
    for (int64_t kvi = 0; kvi < a.kvb; ++kvi)
      rows_pv(a.g, *a.cfg.rows, kc, reinterpret_cast<const float*>(P) + kvi * a.mqh, a.g.mq, a.mqh,
              v_.head(bl.x.b, bl.x.hk + kvi), j0, p_.dv, O + kvi * a.mqh * a.dvp, a.dvp, fix);
  }
  if (fix) add_nonfinite(bl, j0, kc, P, ldp, O);
}

// The NaN / Inf elements of V that the GEMM read as 0 (list_nonfinite), added as P_ij v_j
// to the rows that see key j: O's other rows never read them.
template <class Src>
void Attention<Src>::add_nonfinite(const Block& bl, int64_t j0, int64_t kc, const char* P, int64_t ldp,
                              float* O) const {
  const Plan& a = a_;
  const Geometry& g = bl.gb2;
  for (const NonFiniteV& e : *bl.bad) {
    if (e.key < j0 || e.key >= j0 + kc) continue;
    const float v = core::load_as_f32(v_.row(bl.x.b, e.key, bl.x.hk + e.kvi), e.col, p_.kv_dtype);
    const int64_t r0 = a.rows_mode ? e.kvi * a.mqh : 0, r1 = a.rows_mode ? r0 + a.mqh : g.mq;
    for (int64_t i = r0; i < r1; ++i) {
      if (!bl.x.out.valid(i) || e.key < bl.lo[i] || e.key >= bl.hi[i]) continue;
      const float pij = a.rows_mode ? reinterpret_cast<const float*>(P)[(e.key - j0) * ldp + i]
                                    : core::load_as_f32(P, pack_index(g.pa, e.key - j0, i, ldp), g.pt);
      O[i * a.dvp + e.col] += pij * v;
    }
  }
}

// Decode blocks read V in place. Where a key of its tiles that not every row sees holds a
// NaN / Inf in V (a row that sees every key gets it through P V anyway), every NaN / Inf
// of its tiles is listed, per kv head of the block (pv then zeroes them all in its copy
// of V and adds each back where it is seen); null when there is none.
template <class Src>
const std::vector<NonFiniteV>* Attention<Src>::decode_nonfinite(const Block& bl) const {
  thread_local std::vector<NonFiniteV> bad;
  bad.clear();
  const int64_t kc = a_.g.kc;
  const int64_t t0 = bl.kr.key_lo / kc * kc, t1 = std::min(bl.x.sk, (bl.kr.key_hi + kc - 1) / kc * kc);
  for (int64_t kvi = 0; kvi < a_.kvb; ++kvi) {
    const auto v = v_.head(bl.x.b, bl.x.hk + kvi);
    list_nonfinite(v, t0, std::min(t1, std::max(t0, bl.kr.all_lo)), p_.dv, kvi, bad);
    list_nonfinite(v, std::max(t0, bl.kr.all_hi), t1, p_.dv, kvi, bad);
  }
  if (bad.empty()) return nullptr;
  bad.clear();
  for (int64_t kvi = 0; kvi < a_.kvb; ++kvi) list_nonfinite(v_.head(bl.x.b, bl.x.hk + kvi), t0, t1, p_.dv, kvi, bad);
  return &bad;
}

// The score transform of a block's mq rows: the call's softcap and scale, and with ALiBi
// each row's slope (of its head) and diagonal (its position + Sk - Sq in its sequence).
template <class Src>
TileMod Attention<Src>::tile_mod(const Item& x, int64_t mq, Arena& arena) const {
  TileMod m{a_.mod, p_.scale, nullptr, nullptr};
  if (!a_.mod.alibi) return m;
  float* slope = arena.take<float>(mq);
  int64_t* diag = arena.take<int64_t>(mq);
  for (int64_t i = 0; i < mq; ++i) {
    slope[i] = p_.slope(x.b, x.h0 + i / a_.seg);
    diag[i] = x.s0 + i % a_.seg + x.sk - x.sq;
  }
  m.slope = slope;
  m.diag = diag;
  return m;
}

template <class Src>
void Attention<Src>::run_item(Chunk& ch, int64_t it2) {
  const Plan& a = a_;
  const int64_t it = it2 / ch.nsplit, part = it2 % ch.nsplit;
  Phases& ph = phases();
  Lap lap(timed_);
  Block bl;
  bl.x = locate(ch.g0, it);
  const Item& x = bl.x;
  if (x.out.rows <= 0) return;
  bl.skp = round_up(std::max<int64_t>(x.sk, 1), a.g.key_align);
  // (the row ops pack nothing: packed_ is null there, and so are these)
  bl.kpack = packed_ ? packed_ + (x.gi - ch.g0) * a.group_bytes : nullptr;
  bl.vpack = packed_ ? bl.kpack + a.skp_max * a.kp * a.g.es : nullptr;
  bl.k = k_.head(x.b, x.hk);
  const core::BandMask mask = core::make_mask(p_.causal, p_.window_left, p_.window_right, x.sq, x.sk);

  // (per-thread buffers kept across items and calls, as the arenas: no allocation per item)
  thread_local Arena item_arena;
  const int64_t qbytes = a.g.mq * a.kp * (a.rows_mode ? 2 * 4 : a.g.es);
  item_arena.reset(static_cast<size_t>(qbytes + (a.kp + 64) * 4 + 2 * a.g.mq * 8 + 4 * 64 +
                                       (a.mod.alibi ? a.g.mq * 12 + 2 * 64 : 0)));
  bl.qpack = item_arena.take<char>(qbytes);
  float* const rowbuf = item_arena.take<float>(a.kp + 64);
  int64_t* const lo = item_arena.take<int64_t>(a.g.mq);
  int64_t* const hi = item_arena.take<int64_t>(a.g.mq);
  pack_queries(x, bl.qpack, rowbuf);
  bl.gb = a.g;
  bl.gb2 = a.g2;
  if (!a.rows_mode) bl.gb.mq = bl.gb2.mq = live_rows(a.g, a.g2, x.out.rows);
  bl.kr = key_range(x, bl.gb.mq, mask, lo, hi);
  bl.lo = lo;
  bl.hi = hi;
  if (a.mod.active()) bl.mod = tile_mod(x, bl.gb.mq, item_arena);
  if (banded_ && a.rows_mode) {
    bl.bad = decode_nonfinite(bl);
  } else if (banded_) {  // the group's lists from its packing parts
    thread_local std::vector<NonFiniteV> bad;
    bad.clear();
    for (int64_t part = 0; part < parts_; ++part) {
      const std::vector<NonFiniteV>& pl = vbad_[size_t((x.gi - ch.g0) * parts_ + part)];
      bad.insert(bad.end(), pl.begin(), pl.end());
    }
    if (!bad.empty()) bl.bad = &bad;
  }
  lap.to(ph.pack);

  int64_t key_lo = bl.kr.key_lo, key_hi = bl.kr.key_hi;
  BlockOut out = x.out;
  if (key_hi <= key_lo) key_lo = key_hi = 0;  // every row fully masked: O = 0
  if (ch.nsplit > 1) {
    // This part's tiles [t0, t1) of the sequence; ranges stay tile-aligned, so no key
    // is seen by two parts.
    const int64_t nt = (bl.skp + a.g.kc - 1) / a.g.kc;
    key_lo = std::max(key_lo, nt * part / ch.nsplit * a.g.kc);
    key_hi = std::min(key_hi, nt * (part + 1) / ch.nsplit * a.g.kc);
    if (key_hi <= key_lo) key_lo = key_hi = 0;
    // Scratch rows are contiguous: segment stride = seg rows.
    out = BlockOut{ch.split_o.data() + it2 * a.g.mq * p_.dv, p_.dv, DType::f32, x.out.rows, p_.dv,
                   nullptr, a.seg, a.seg * p_.dv, a.seg};
    out.ml = ch.split_ml.data() + it2 * a.g.mq * 2;
  }
  auto scores_of = [&](int64_t j0, int64_t kc, float* t, float* mx, bool negate, Phases& phx, Lap& lapx) {
    return scores(bl, j0, kc, t, mx, negate, phx, lapx);
  };
  auto pv_of = [&](int64_t j0, int64_t kc, const char* P, int64_t ldp, float* O) {
    pv(bl, j0, kc, P, ldp, O);
  };
  softmax_block(bl.gb2, a.strategy, p_.exp2, a.c, a.softmax_scale, scores_of, key_lo, key_hi, pv_of, bl.skp,
                a.dvp, out, timed_, ph);
}

// Runs every query block of groups [g0, g1) (their K and V packed), split over keys when
// there are fewer blocks than threads.
template <class Src>
void Attention<Src>::run_blocks(int64_t g0, int64_t g1) {
  const Plan& a = a_;
  Chunk ch;
  ch.g0 = g0;
  // Work items: (group, block of the group).
  ch.items = (g1 - g0) * a.blocks_per_group;
  // Split over keys (decode-like shapes: fewer work items than threads). Each item's key
  // tiles are cut into nsplit parts run as separate items; every part writes its own
  // normalized O and lse to scratch, and the parts are merged with weights
  // exp(lse_s - max lse) (FlashAttention's split-KV combine), so no thread idles.
  const int64_t ktiles = (a.skp_max + a.g.kc - 1) / a.g.kc;
  ch.nsplit = ch.items < a.nthreads ? std::min<int64_t>((a.nthreads + ch.items - 1) / ch.items, ktiles) : 1;
  ch.split_o.resize(static_cast<size_t>(ch.nsplit > 1 ? ch.items * ch.nsplit * a.g.mq * p_.dv : 0));
  ch.split_ml.resize(static_cast<size_t>(ch.nsplit > 1 ? ch.items * ch.nsplit * a.g.mq * 2 : 0));
  // Items of equal cost (no mask band, one sequence length) go out in contiguous runs,
  // the groups' runs of the packing loop: each thread then reads the Q, K, V and O rows of
  // the same heads as in the previous call, still in its L2. Causal, windowed, varlen and
  // KV-cache items (their own lengths) differ in cost: taken in turn.
  const int64_t total = ch.items * ch.nsplit;
  const bool even = !a.varlen && p_.seqlens_k == nullptr && !p_.causal && !p_.windowed();
#pragma omp parallel num_threads(a.nthreads)
  {
    if (even) {
      const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
      for (int64_t it2 = total * id / nt; it2 < total * (id + 1) / nt; ++it2) run_item(ch, it2);
    } else {
#pragma omp for schedule(dynamic)
      for (int64_t it2 = 0; it2 < total; ++it2) run_item(ch, it2);
    }
  }
  if (ch.nsplit > 1) {
    Lap lap(timed_);
    merge_splits(ch.items, ch.nsplit, a.g.mq, p_.dv, ch.split_o, ch.split_ml,
                 [&](int64_t it) { return locate(g0, it).out; }, a.nthreads);
    lap.to(phases_[0].normalize);
  }
}

}  // namespace

void attention(const core::AttentionProblem& p, PhaseTimes* times) {
  if (p.block_table != nullptr)
    Attention<PagedKvSource>(p, times).run(times);
  else
    Attention<KvSource>(p, times).run(times);
}

}  // namespace flashcore::cpu
