// The CPU strategies, written once against the micro-kernel interface (ukernel.hpp).
//
// Data flow for one query block of Mq rows (Mq a multiple of the GEMM kernel's MR and
// NR). Scores are key-major tiles T[kc][Mq], the A operand of the second GEMM as it is:
//
//   stage 1  T  = Xblk (A operand, k = head dim) x Y^T (B panels of Mq queries)
//            (attention: X = K, Y = Q;  gemm_chain: X = B^T columns, Y = A rows;
//             softmax_v: T is read from the given scores instead)
//   softmax  m = max over keys; P = exp2(c*T - c*m) in the kernel's operand dtype;
//            l = row sums of P (c = scale * log2(e), seed 000's exp2 domain)
//   stage 2  O[Mq][Dv] += P^T x V panels
//   finish   O /= l, lse = scale*m + ln(l), convert to the output dtype
//
// Strategies differ only in how they order these steps over the key tiles:
//   two_pass   max-find over all tiles (scores kept in a strip), then exp+pack of tile
//              t+pipe_ahead interleaved with the GEMM of tile t through a ring buffer
//   three_pass max-find, then every P block into one buffer, then one pure GEMM over it
//   online     per tile: running max, rescale O and l when it grows, exp+pack, GEMM
// softmax_block runs one query block through one of them; the ops (attention.cpp,
// softmax_v.cpp) supply the scores and the P V step. merge_splits joins the parts of a
// block that ran split over keys, row by row through merge_row (which merge_states shares).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "core/variants/score.hpp"
#include "cpu/pipelines/common.hpp"
#include "cpu/pipelines/geometry.hpp"
#include "cpu/pipelines/pack.hpp"

namespace flashcore::cpu {

inline constexpr int kPipeAhead = 1;  // two_pass: producer leads the GEMM by this many tiles
// exp2_pack computes P = 2^(c s - cm) with cm = c m rounded to fp32 once per row. The
// rounding error (half an ulp of cm, a constant of the row) cancels in O / l, but not in
// lse or in the weights that merge a split block's parts (1e-5 relative at cm = 2^8), and
// at 2^31 it reaches whole powers of two (64): the row's own maximum came out as 2^+-64, an
// overflow to inf or a row read back as fully masked. Rows whose c m is at least this
// large take their scores relative to m first (s - m, exact at the max) and cm = 0, which
// costs a pass over the row's scores, for such rows only (scaled logits past ~177).
inline constexpr float kShiftedMaxFrom = 0x1p8f;

// One query block through a strategy. `Scores` (j0, kc, t, mx, negate, phases, lap) fills
// key tile [j0, j0+kc) as T[kc][mq] (negated first when `negate`; masked entries -inf)
// and returns whether it also folded the tile's column max into mx (given only where it
// may; softmax_block does it otherwise).
// Rows of a block are segments of `seg` rows, one per head (a GQA block holds several
// heads' queries; other blocks are one segment): row i is row i % seg of segment i / seg,
// and the first `rows` rows of each segment exist (the rest is padding).
struct BlockOut {
  void* o;          // output row 0 of the block
  int64_t o_stride; // between output rows of a segment (elements)
  DType o_type = DType::f32;  // (es below reads it, also in a default-constructed one)
  int64_t rows;     // valid rows per segment (<= seg)
  int64_t dv;
  float* lse;       // lse of row 0 (stride 1 within a segment) or null
  int64_t seg;      // rows per segment
  int64_t o_hs = 0, lse_hs = 0;  // between segments (elements)
  int64_t es = int64_t(dtype_size(o_type));
  // A part of a block split over keys (merge_splits): per row, the scaled max and the sum l
  // its O was normalized by, at ml[2 i], ml[2 i + 1] (rows contiguous; lse is not written).
  float* ml = nullptr;
  // Attention sinks (core::join_sink): the sink logit of segment 0 (segment s at sink[s]),
  // joined to each row's sum when the row is stored (not by the parts of a split block:
  // merge_splits joins it); null = none.
  const float* sink = nullptr;
  bool valid(int64_t i) const { return i % seg < rows; }
  char* row(int64_t i) const {
    return static_cast<char*>(o) + ((i / seg) * o_hs + (i % seg) * o_stride) * es;
  }
  float* lse_at(int64_t i) const { return lse + (i / seg) * lse_hs + i % seg; }
};

// A negative scale turns the row max of scale*s into scale*min(s). Rather than a second
// max/min path, the Scores callable negates the scores (before it blanks masked entries
// with -inf: a score of -inf that is not masked becomes +inf, as scale*s is) and
// softmax_block flips the scale.
inline void negate_scores(float* t, int64_t n) {
  for (int64_t i = 0; i < n; ++i) t[i] = -t[i];
}

// `pv(j0, kc, P, ldp, O)` adds P^T x V rows [j0, j0+kc) into O[mq][dvp] (P: kc keys x mq
// queries in layout g.pa, leading dimension ldp); rp is the
// (padded) key count.
template <class Scores, class PV>
void softmax_block(const Geometry& g, Strategy strategy, Exp2Mode mode, float c, float scale,
                   const Scores& raw_scores, int64_t key_lo, int64_t key_hi, const PV& pv,
                   int64_t rp, int64_t dvp, const BlockOut& out, bool timed, Phases& ph) {
  const int64_t mq = g.mq;
  Lap lap(timed);
  const bool flip = c < 0.0f;
  if (flip) {
    c = -c;
    scale = -scale;
  }
  // Fills tile t and folds its column max into mx: in stage 1 where the Scores callable
  // can (it returns true), else here. (Not with flipped scores: their max is taken after.)
  auto scores = [&](int64_t j0, int64_t kc, float* t, float* mx, Phases& phx, Lap& lapx) {
    const bool fused = raw_scores(j0, kc, t, flip ? nullptr : mx, flip, phx, lapx);
    if (!fused) g.vec->col_max(kc, mq, t, mq, mx);
  };
  int64_t t_begin = key_lo / g.kc, t_end = key_hi > key_lo ? (key_hi + g.kc - 1) / g.kc : t_begin;
  const int64_t ntiles = t_end - t_begin;
  const int64_t keys_total = std::min(ntiles * g.kc, rp - t_begin * g.kc);
  auto tile_len = [&](int64_t t) { return std::min(g.kc, rp - t * g.kc); };

  Arena& arena = thread_arena();
  const bool strip = strategy != Strategy::online;
  const int64_t tbuf_rows = strip ? std::max<int64_t>(keys_total, 1) : g.kc;
  const int64_t pbuf_rows = strategy == Strategy::three_pass ? std::max<int64_t>(keys_total, 1)
                            : strategy == Strategy::two_pass ? (kPipeAhead + 1) * g.kc
                                                             : g.kc;
  arena.reset(static_cast<size_t>(tbuf_rows * mq * 4 + pbuf_rows * mq * g.es + mq * dvp * 4 + 10 * mq * 4 +
                     9 * 64));
  float* T = arena.take<float>(tbuf_rows * mq);
  char* P = arena.take<char>(pbuf_rows * mq * g.es);
  float* O = arena.take<float>(mq * dvp);
  float* m = arena.take<float>(mq);
  float* l = arena.take<float>(mq);
  float* cm = arena.take<float>(mq);
  float* alpha = arena.take<float>(mq);
  float* tmax = arena.take<float>(mq);
  float* tsum = arena.take<float>(mq);
  float* shift = arena.take<float>(mq);  // per row: m where scores are shifted (kShiftedMaxFrom), else 0
  bool shifted = false;
  std::fill(O, O + mq * dvp, 0.0f);
  std::fill(m, m + mq, kNegInf);
  std::fill(l, l + mq, 0.0f);

  // c*m with the fully-masked case (m = -inf) mapped to 0 so that exp2(-inf - 0) = 0;
  // rows with a very large c*m are shifted instead (kShiftedMaxFrom): cm = 0.
  auto fold_max = [&]() {
    shifted = false;
    for (int64_t i = 0; i < mq; ++i) {
      cm[i] = m[i] == kNegInf ? 0.0f : c * m[i];
      shift[i] = 0.0f;
      // (a finite m whose c*m overflows to +-inf is shifted too: ALiBi's bias can take a
      // score near -FLT_MAX, where exp2(c*s - c*m) would be exp2(-inf + inf) = NaN)
      if (std::abs(cm[i]) >= kShiftedMaxFrom && std::isfinite(m[i])) {
        shift[i] = m[i];
        cm[i] = 0.0f;
        shifted = true;
      }
    }
  };
  // exp+pack of one key tile. Its row sums go through a tile-local sum before joining l:
  // adding tens of thousands of terms one by one into l cost fp32 softmax_v 2.8e-5 rel_err
  // at L = 32768 (one partial sum per tile: ~2e-7).
  // P is written in the kernel's A layout (g.pa): a buffer of `width` keys has leading
  // dimension p_ld(width) (the row length for `rows`, mq otherwise), and key kk of it
  // starts at p_at(buffer, kk, ld).
  auto p_ld = [&](int64_t width) { return g.pa == Layout::rows ? width : mq; };
  auto p_at = [&](char* buf, int64_t kk, int64_t ld) {
    return buf + pack_index(g.pa, kk, 0, ld) * g.es;
  };
  auto exp_tile = [&](int64_t kc, float* t, char* p, int64_t ldp) {
    if (shifted)
      for (int64_t i = 0; i < mq; ++i)
        if (shift[i] != 0.0f)
          for (int64_t k = 0; k < kc; ++k) t[k * mq + i] -= shift[i];
    std::fill(tsum, tsum + mq, 0.0f);
    g.vec->exp2_pack(kc, mq, t, mq, c, cm, p, ldp, g.pt, g.pa, mode, tsum);
    for (int64_t i = 0; i < mq; ++i) l[i] += tsum[i];
  };

  if (strategy == Strategy::online) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t kc = tile_len(t);
      std::fill(tmax, tmax + mq, kNegInf);
      scores(t * g.kc, kc, T, tmax, ph, lap);
      // The reference max m[i] follows the tile max only past the slack (g.rescale_slack);
      // the first visible key always sets it (m = -inf before).
      bool rescale = false;
      for (int64_t i = 0; i < mq; ++i) {
        alpha[i] = 1.0f;
        if (m[i] == kNegInf) {
          m[i] = tmax[i];
        } else if (c * (tmax[i] - m[i]) > g.rescale_slack) {
          alpha[i] = std::exp2(c * (m[i] - tmax[i]));
          rescale = true;
          m[i] = tmax[i];
        }
      }
      fold_max();
      lap.to(ph.max_find);
      if (rescale) {
        g.vec->scale_rows(mq, dvp, O, dvp, alpha);
        for (int64_t i = 0; i < mq; ++i) l[i] *= alpha[i];
      }
      exp_tile(kc, T, P, p_ld(g.kc));
      lap.to(ph.exp_pack);
      pv(t * g.kc, kc, P, p_ld(g.kc), O);
      lap.to(ph.gemm);
    }
  } else {
    // Phase 0: scores of every tile into the strip, and the row max.
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t kc = tile_len(t);
      float* tt = T + (t - t_begin) * g.kc * mq;
      scores(t * g.kc, kc, tt, m, ph, lap);
      lap.to(ph.max_find);
    }
    fold_max();
    if (strategy == Strategy::three_pass) {
      // Phase 1: all of P; phase 2: one pure GEMM over every key.
      const int64_t ld = p_ld(std::max<int64_t>(keys_total, 1));
      for (int64_t t = t_begin; t < t_end; ++t)
        exp_tile(tile_len(t), T + (t - t_begin) * g.kc * mq, p_at(P, (t - t_begin) * g.kc, ld), ld);
      lap.to(ph.exp_pack);
      if (keys_total > 0) pv(t_begin * g.kc, keys_total, P, ld, O);
      lap.to(ph.gemm);
    } else {
      // Phases 1+2: the producer runs kPipeAhead tiles ahead of the GEMM in a ring.
      const int64_t slots = kPipeAhead + 1;
      auto produce = [&](int64_t t) {
        exp_tile(tile_len(t), T + (t - t_begin) * g.kc * mq,
                 P + ((t - t_begin) % slots) * g.kc * mq * g.es, p_ld(g.kc));
        lap.to(ph.exp_pack);
      };
      for (int64_t t = t_begin; t < std::min(t_end, t_begin + kPipeAhead); ++t) produce(t);
      for (int64_t t = t_begin; t < t_end; ++t) {
        if (t + kPipeAhead < t_end) produce(t + kPipeAhead);
        pv(t * g.kc, tile_len(t), P + ((t - t_begin) % slots) * g.kc * mq * g.es, p_ld(g.kc), O);
        lap.to(ph.gemm);
      }
    }
  }

  // Phase 3: normalize, lse, store. A row with no visible key, or only -inf scores, has
  // l = 0: O = 0 (written as zeros: its accumulator may hold 0 * Inf from V) and lse = -inf.
  // A row that saw a NaN score (or +inf, whose 2^(inf - inf) is NaN) has l = NaN: its O is
  // NaN (NaN * 0) and so is its lse, which must not read as "fully masked".
  // With a sink (out.sink), the row's sum and lse take it in (core::join_sink): a row with
  // no key then has lse = the sink.
  const bool sinks = out.sink != nullptr && out.ml == nullptr;
  for (int64_t i = 0; i < mq; ++i) {
    if (!out.valid(i)) continue;
    // (a part of a split row keeps its 0 * NaN: the merge reads it where other parts saw scores)
    if (l[i] == 0.0f && out.ml == nullptr) std::fill(O + i * dvp, O + i * dvp + out.dv, 0.0f);
    float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    float lse = l[i] > 0.0f ? scale * m[i] + std::log(l[i]) : l[i] == 0.0f ? kNegInf : l[i];
    if (sinks && l[i] >= 0.0f) {
      const core::SinkJoin j = core::join_sink(scale * m[i], l[i], out.sink[i / out.seg]);
      inv = j.inv;
      lse = j.lse;
    }
    g.vec->store_row(O + i * dvp, out.dv, inv, out.row(i), out.o_type);
    if (out.lse != nullptr) *out.lse_at(i) = lse;
    if (out.ml != nullptr) {
      out.ml[2 * i] = l[i] > 0.0f ? scale * m[i] : l[i] == 0.0f ? kNegInf : l[i];
      out.ml[2 * i + 1] = l[i];
    }
  }
  lap.to(ph.normalize);
}

// One output row merged from n parts that each normalized their O row by their own sum
// (FlashAttention's split-KV combine): ml(s) gives part s's scaled max m_s and sum l_s as a
// MergedRow {m, l} (an lse is {lse, 1}); add(s, w, acc) adds w times its O row into acc[dv].
// Weights w_s = l_s exp(m_s - max), a part at the max (+inf too) l_s; a part with m_s = -inf
// saw no finite score and is not read (its O may hold anything), unless read_empty: then
// its O row, times 0, is added too (a split row's part whose seen keys all scored -inf
// still passes on the NaN of a seen value, as 0 * NaN does unsplit). acc ends as
// sum_s w_s o_s, not yet normalized; returns the row's (max, sum_s w_s), the pair an
// unsplit row has after its keys: (-inf, 0) with acc = 0 when every part is -inf, a NaN
// max (and NaN sum and acc) when any m_s is NaN. finish_row normalizes.
struct MergedRow {
  float m, l;
};
template <class ML, class Add>
MergedRow merge_row(int64_t n, const ML& ml, const Add& add, float* acc, int64_t dv, bool read_empty = false) {
  float mx = kNegInf;
  for (int64_t s = 0; s < n; ++s) {
    const float m = ml(s).m;
    mx = std::isnan(m) ? m : std::max(mx, m);  // (std::max keeps a NaN first argument)
  }
  std::fill(acc, acc + dv, 0.0f);
  if (mx == kNegInf) return {kNegInf, 0.0f};
  float wsum = 0.0f;
  for (int64_t s = 0; s < n; ++s) {
    const auto [m, l] = ml(s);
    if (m == kNegInf) {
      if (read_empty) add(s, 0.0f, acc);
      continue;
    }
    const float w = m == mx ? l : l * std::exp(m - mx);
    add(s, w, acc);
    wsum += w;
  }
  return {mx, wsum};
}

// A merged row's O (acc, divided by its sum) and lse, max + log(sum); with a sink (non-null)
// joined to the sum as softmax_block joins it to an unsplit row's (core::join_sink). A row
// with no key: acc stays 0, lse -inf (or the sink).
inline float finish_row(MergedRow r, const float* sink, float* acc, int64_t dv) {
  if (sink != nullptr) {
    const core::SinkJoin j = core::join_sink(r.m, r.l, *sink);
    for (int64_t k = 0; k < dv; ++k) acc[k] *= j.inv;
    return j.lse;
  }
  if (r.l == 0.0f) return kNegInf;
  for (int64_t k = 0; k < dv; ++k) acc[k] /= r.l;
  return r.m + std::log(r.l);
}

// Split over keys: each of `items` blocks ran as `nsplit` parts over disjoint key ranges,
// each part writing its normalized O rows and its (scaled max, l) pairs to scratch (split_o
// [item][part][mq][dv], split_ml [item][part][mq][2]); merge_row joins the parts into
// out_of(item) (a BlockOut) with weights l_s exp(max_s - max). Not through each part's lse:
// at large scores (lse ~ 1e26) fp32 cannot hold log(l) beside the max, and parts whose
// maxima tie lost their sums' ratio (tied keys counted per part).
template <class OutOf>
void merge_splits(int64_t items, int64_t nsplit, int64_t mq, int64_t dv, const std::vector<float>& split_o,
                  const std::vector<float>& split_ml, const OutOf& out_of, int nthreads) {
#pragma omp parallel for num_threads(nthreads)
  for (int64_t it = 0; it < items; ++it) {
    const BlockOut out = out_of(it);
    if (out.rows <= 0) continue;
    std::vector<float> acc(static_cast<size_t>(dv));
    for (int64_t i = 0; i < mq; ++i) {
      if (!out.valid(i)) continue;
      const auto part = [&](int64_t s) { return (it * nsplit + s) * mq + i; };
      const MergedRow r = merge_row(
          nsplit,
          [&](int64_t s) {
            const float* ml = split_ml.data() + part(s) * 2;
            return MergedRow{ml[0], ml[1]};
          },
          [&](int64_t s, float w, float* a) {
            const float* os = split_o.data() + part(s) * dv;
            for (int64_t j = 0; j < dv; ++j) a[j] += w * os[j];
          },
          acc.data(), dv, true);
      const float lse = finish_row(r, out.sink != nullptr ? out.sink + i / out.seg : nullptr, acc.data(), dv);
      core::convert_row(acc.data(), dv, out.row(i), out.o_type);
      if (out.lse) *out.lse_at(i) = lse;
    }
  }
}

}  // namespace flashcore::cpu
